package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// seedHistory fills fila_jobs the way a busy day leaves it: a long history of
// completed rows, and a backlog, running, dead and cancelled rows that are a
// small share of it. The trigger is off while seeding, as for a bulk load.
func seedHistory(t *testing.T, db *testdb.DB, completed int) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	require.NoError(t, err)
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO fila_jobs (queue, kind, state, attempts, started_at, finished_at, created_at, run_at)
		SELECT 'q' || (i %% 3), 'kind' || (i %% 7), 'completed', 1,
			now() - (i * interval '8 ms') - interval '40 ms', now() - (i * interval '8 ms'),
			now() - (i * interval '8 ms') - interval '1 s', now() - (i * interval '8 ms') - interval '1 s'
		FROM generate_series(1, %d) i`, completed),
		`INSERT INTO fila_jobs (queue, kind, run_at)
		SELECT 'q' || (i % 3), 'kind' || (i % 7), now() + (i % 5 - 3) * interval '1 minute'
		FROM generate_series(1, 3000) i`,
		`INSERT INTO fila_jobs (queue, kind, state, attempts, started_at, lease_until)
		SELECT 'q' || (i % 3), 'kind' || (i % 7), 'running', 1, now(), now() + (i % 3 - 1) * interval '30 s'
		FROM generate_series(1, 60) i`,
		`INSERT INTO fila_jobs (queue, kind, state, attempts, max_attempts, last_error, started_at, finished_at)
		SELECT 'q' || (i % 3), 'kind' || (i % 7), 'dead', 5, 5, 'boom ' || i, now() - i * interval '1 s', now() - i * interval '1 s'
		FROM generate_series(1, 400) i`,
		`INSERT INTO fila_jobs (queue, kind, state, finished_at)
		SELECT 'q' || (i % 3), 'kind' || (i % 7), 'cancelled', now() - i * interval '1 s'
		FROM generate_series(1, 150) i`,
		`ALTER TABLE fila_jobs ENABLE TRIGGER fila_jobs_notify`,
		`ANALYZE fila_jobs`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
}

// Every statement of a snapshot reads fila_jobs through an index, with the
// planner free to choose a sequential scan (enable_seqscan left on) and
// statistics fresh: a full scan of ten million rows is what made stats slow.
func TestQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	seedHistory(t, db, 200_000)

	var seqscan string
	require.NoError(t, db.Pool.QueryRow(ctx, "SHOW enable_seqscan").Scan(&seqscan))
	require.Equal(t, "on", seqscan)

	w := DefaultWindow
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"clock", clockSQL, nil},
		{"pending", pendingSQL, nil},
		{"running", runningSQL, nil},
		{"cancelled", cancelledSQL, nil},
		{"dead", deadSQL, nil},
		{"dead per queue", deadQueuesSQL, nil},
		{"completed, counted", completedSQL, []any{CompletedExactUpTo + 1, math.Inf(1)}},
		{"completed, estimated", completedSQL, []any{CompletedExactUpTo + 1, 0}},
		{"recent", recentSQL, []any{w.Jobs, w.Age.Seconds()}},
		{"trigger", triggerSQL, nil},
	} {
		var plan []byte
		require.NoError(t, db.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&plan), q.name)
		var root []struct {
			Plan planNode `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(plan, &root), q.name)
		require.Len(t, root, 1)
		var scans []string
		root[0].Plan.walk(func(n planNode) {
			if n.Relation == "fila_jobs" || n.Index != "" {
				scans = append(scans, strings.TrimSpace(n.Type+" "+n.Index))
			}
			if n.Relation == "fila_jobs" {
				require.NotEqual(t, "Seq Scan", n.Type, "%s reads fila_jobs with a sequential scan:\n%s", q.name, plan)
			}
		})
		t.Logf("%s: %s", q.name, strings.Join(scans, "; "))
	}
}

type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}
