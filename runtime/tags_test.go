package runtime_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// Tags and metadata go in by every insert path (one job, a statement of
// many, COPY, a unique job), come out to the handler, are found by ListJobs
// and shown by GetJob; the table refuses what breaks their bounds, from
// plain SQL too.
func TestTagsAndMetadata(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	type seen struct {
		tags     []string
		metadata map[string]any
	}
	var mu sync.Mutex
	got := map[int64]seen{}
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		var m map[string]any
		if j.Metadata != nil {
			if err := json.Unmarshal(j.Metadata, &m); err != nil {
				return err
			}
		}
		mu.Lock()
		got[j.ID] = seen{j.Tags, m}
		mu.Unlock()
		return nil
	}})
	cfg.Concurrency = 100
	start(t, cfg)

	opts := &runtime.InsertOpts{Tags: []string{"billing", "eu"}, Metadata: map[string]any{"tenant": "acme", "n": 1}}
	one, err := runtime.Insert(ctx, db.Pool, "k", nil, opts)
	require.NoError(t, err)
	unique, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{UniqueKey: "u", Tags: []string{"u"}, Metadata: map[string]any{"tenant": "zeta"}})
	require.NoError(t, err)
	few := []runtime.InsertParams{{Kind: "k", InsertOpts: *opts}, {Kind: "k"}}
	fewIDs, err := runtime.InsertMany(ctx, db.Pool, few)
	require.NoError(t, err)
	many := make([]runtime.InsertParams, runtime.InsertManyCopyMin)
	for i := range many {
		many[i] = runtime.InsertParams{Kind: "k"}
	}
	many[7].InsertOpts = runtime.InsertOpts{Tags: []string{"copied"}, Metadata: map[string]any{"tenant": "acme"}}
	manyIDs, err := runtime.InsertMany(ctx, db.Pool, many)
	require.NoError(t, err)
	total := 2 + len(few) + len(many)
	waitFor(t, 30*time.Second, "every job ran", func() bool { return countState(t, db, "completed") == total })

	mu.Lock()
	require.Equal(t, []string{"billing", "eu"}, got[one].tags)
	require.Equal(t, map[string]any{"tenant": "acme", "n": float64(1)}, got[one].metadata)
	require.Equal(t, []string{"u"}, got[unique].tags)
	require.Equal(t, []string{"billing", "eu"}, got[fewIDs[0]].tags)
	require.Nil(t, got[fewIDs[1]].tags)
	require.Nil(t, got[fewIDs[1]].metadata)
	require.Equal(t, []string{"copied"}, got[manyIDs[7]].tags, "the COPY path")
	require.Equal(t, map[string]any{"tenant": "acme"}, got[manyIDs[7]].metadata)
	mu.Unlock()

	byTag, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Tag: "billing"})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{one, fewIDs[0]}, ids(byTag))
	byMeta, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Metadata: map[string]any{"tenant": "acme"}})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{one, fewIDs[0], manyIDs[7]}, ids(byMeta))
	j, err := runtime.GetJob(ctx, db.Pool, one)
	require.NoError(t, err)
	require.Equal(t, []string{"billing", "eu"}, j.Tags)
	require.JSONEq(t, `{"tenant": "acme", "n": 1}`, string(j.Metadata))

	// Bounds, in Go and in the table.
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Tags: []string{""}})
	require.ErrorContains(t, err, "tag")
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Tags: make([]string, runtime.TagsMax+1)})
	require.ErrorContains(t, err, "tags")
	for _, bad := range []string{
		`INSERT INTO fila_jobs (kind, tags) SELECT 'k', array_agg(g::text) FROM generate_series(1, 33) g`,
		`INSERT INTO fila_jobs (kind, tags) VALUES ('k', '{""}')`,
		`INSERT INTO fila_jobs (kind, metadata) VALUES ('k', '[1, 2]')`,
	} {
		_, err = db.Pool.Exec(ctx, bad)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, bad)
		require.Equal(t, "fila_jobs_tags_metadata_valid", pgErr.ConstraintName, bad)
	}
}

func ids(rows []runtime.JobRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
