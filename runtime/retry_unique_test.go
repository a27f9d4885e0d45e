package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// seedKeyed writes a job of kind sync with a unique key in a state, as a
// worker would have left it; states is its unique_states (nil for the
// default, pending and running).
func seedKeyed(t *testing.T, db *testdb.DB, state, key string, states []string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, last_error, unique_key, unique_states, run_at)
VALUES ('sync', $1::text, CASE WHEN $1::text = 'pending' THEN 0 ELSE 3 END, 3,
        CASE WHEN $1::text IN ('dead', 'cancelled', 'completed') THEN now() END,
        CASE WHEN $1::text = 'dead' THEN 'boom' END, $2::text, $3::text[], now() + interval '1 hour')
RETURNING id`, state, key, states).Scan(&id))
	return id
}

func skipsByID(res runtime.ChangeResult) map[int64]runtime.JobSkip {
	m := map[int64]runtime.JobSkip{}
	for _, s := range res.Skipped {
		m[s.ID] = s
	}
	return m
}

// TestRetrySkipsJobsWhoseUniqueKeyIsHeld: one job whose key a pending job
// holds used to fail the whole retry with a bare 23505 that named neither
// job nor key. Each job that can move moves; each that cannot is named with
// its key and the job holding it.
func TestRetrySkipsJobsWhoseUniqueKeyIsHeld(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	j1 := seedKeyed(t, db, "dead", "acct:1", nil)
	j2 := seedKeyed(t, db, "dead", "acct:2", nil)
	j3 := seedKeyed(t, db, "cancelled", "acct:3", nil)
	holder := seedKeyed(t, db, "pending", "acct:2", nil)
	// Two dead jobs sharing a free key: the older moves, the other waits.
	twinA := seedKeyed(t, db, "dead", "acct:4", nil)
	twinB := seedKeyed(t, db, "dead", "acct:4", nil)
	// Unique only while running: pending, it holds nothing and holds
	// nobody back.
	runningOnly := seedKeyed(t, db, "dead", "acct:2", []string{"running"})
	// A completed job holds its key when its unique states say so.
	seedKeyed(t, db, "completed", "acct:5", []string{"pending", "running", "completed"})
	j5 := seedKeyed(t, db, "dead", "acct:5", nil)

	res, err := runtime.Retry(ctx, db.Pool, j1, j2, j3, twinA, twinB, runningOnly, j5)
	require.NoError(t, err)
	require.Equal(t, []int64{j1, j3, twinA, runningOnly}, res.IDs())
	skips := skipsByID(res)
	require.Len(t, skips, 3)
	require.Equal(t, runtime.JobSkip{ID: j2, State: "dead", UniqueKey: "acct:2", HeldBy: holder, HeldByState: "pending",
		Reason: fmt.Sprintf(`job %d: unique key "acct:2" is held by pending job %d`, j2, holder)}, skips[j2])
	require.Equal(t, twinA, skips[twinB].HeldBy)
	require.Equal(t, fmt.Sprintf(`job %d: unique key "acct:4" is held by job %d, which this retry put back to pending`, twinB, twinA), skips[twinB].Reason)
	require.Equal(t, "completed", skips[j5].HeldByState)
	require.ErrorContains(t, res.Err(), `unique key "acct:2" is held by pending job`)
	for id, want := range map[int64]string{j1: "pending", j2: "dead", j3: "pending", twinA: "pending", twinB: "dead", runningOnly: "pending", j5: "dead"} {
		s, _, _ := jobState(t, db, id)
		require.Equal(t, want, s, "job %d", id)
	}

	// Set-based, over every dead job: the same reasons.
	again := seedKeyed(t, db, "dead", "acct:1", nil) // acct:1 is pending again (j1)
	free := seedKeyed(t, db, "dead", "acct:6", nil)
	res, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{State: "dead"})
	require.NoError(t, err)
	require.Equal(t, []int64{free}, res.IDs())
	skips = skipsByID(res)
	require.Len(t, skips, 4)
	require.Equal(t, fmt.Sprintf(`job %d: unique key "acct:1" is held by pending job %d`, again, j1), skips[again].Reason)
	require.Equal(t, holder, skips[j2].HeldBy)
	require.Equal(t, twinA, skips[twinB].HeldBy)
	require.Equal(t, "pending", skips[twinB].HeldByState)

	// In the caller's transaction too, which stays usable.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	res, err = runtime.Retry(ctx, tx, j2)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	require.Equal(t, holder, res.Skipped[0].HeldBy)
	res, err = runtime.Cancel(ctx, tx, holder)
	require.NoError(t, err)
	require.Len(t, res.Changed, 1)
	res, err = runtime.Retry(ctx, tx, j2)
	require.NoError(t, err)
	require.Equal(t, []int64{j2}, res.IDs(), "the key is free once its holder is cancelled")
	require.NoError(t, tx.Commit(ctx))
}

// TestRetryOfAKeyEnqueuedMeanwhile: a job holding the key, enqueued by a
// transaction the retry's snapshot cannot see, makes the retry's update
// wait for it, then break the unique index when it commits; the retry runs
// again, sees the holder, and refuses that job alone.
func TestRetryOfAKeyEnqueuedMeanwhile(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	dead := seedKeyed(t, db, "dead", "acct:7", nil)
	other := seedKeyed(t, db, "dead", "acct:8", nil)

	producer, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer producer.Rollback(ctx)
	newer, err := runtime.Insert(ctx, producer, "sync", nil, &runtime.InsertOpts{UniqueKey: "acct:7"})
	require.NoError(t, err)

	type result struct {
		res runtime.ChangeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := runtime.Retry(ctx, db.Pool, dead, other)
		done <- result{res, err}
	}()
	waitFor(t, 10*time.Second, "the retry waits for the producer's row", func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%held AS%')`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, producer.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, []int64{other}, r.res.IDs())
	require.Len(t, r.res.Skipped, 1)
	require.Equal(t, newer, r.res.Skipped[0].HeldBy)
	s, _, _ := jobState(t, db, dead)
	require.Equal(t, "dead", s)
}
