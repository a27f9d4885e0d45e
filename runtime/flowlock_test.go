package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A job inserted behind another in a sequence, or depending on it, locks
// that job's row (FOR SHARE) until its transaction ends, and a claim's
// SKIP LOCKED passes over a row held that way: a worker that claimed
// meanwhile found nothing and slept, and no notification came when the
// lock went (the new job itself is waiting). The job ran only at the next
// safety poll, ten minutes here. The transaction that took the lock now
// notifies the held job's queue, so the worker wakes when it commits.
func TestFlowInsertDoesNotHideTheJobItLocks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second func(first int64) runtime.InsertOpts
	}{
		{"sequence", func(int64) runtime.InsertOpts { return runtime.InsertOpts{Sequence: "k"} }},
		{"dependency", func(first int64) runtime.InsertOpts { return runtime.InsertOpts{After: []int64{first}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			ctx := context.Background()
			var (
				mu  sync.Mutex
				ran []int64
			)
			cfg := baseConfig(t, db, runtime.Kind{Name: "held", Handler: func(_ context.Context, j *runtime.Job) error {
				mu.Lock()
				ran = append(ran, j.ID)
				mu.Unlock()
				return nil
			}})
			first, err := runtime.Insert(ctx, db.Pool, "held", nil, &runtime.InsertOpts{Sequence: "k"})
			require.NoError(t, err)

			// The second job's insert holds the first job's row until commit.
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			opts := tc.second(first)
			second, err := runtime.Insert(ctx, tx, "held", nil, &opts)
			require.NoError(t, err)
			var held bool
			require.NoError(t, db.Pool.QueryRow(ctx,
				`SELECT NOT EXISTS (SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR NO KEY UPDATE SKIP LOCKED)`, first).Scan(&held))
			require.True(t, held, "the insert must hold the first job's row for this test to mean anything")

			// The worker's first claim passes over the held row; it sleeps.
			start(t, cfg)
			waitFor(t, 10*time.Second, "the worker asleep", func() bool {
				var n int
				require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_sleepers WHERE queue = 'default'`).Scan(&n))
				return n > 0
			})
			mu.Lock()
			require.Empty(t, ran, "nothing can be claimed while the row is held")
			mu.Unlock()

			require.NoError(t, tx.Commit(ctx))
			waitFor(t, 10*time.Second, "both jobs run after the commit, without a safety poll", func() bool {
				s1, _, _ := jobState(t, db, first)
				s2, _, _ := jobState(t, db, second)
				return s1 == "completed" && s2 == "completed"
			})
			mu.Lock()
			require.Equal(t, []int64{first, second}, ran)
			mu.Unlock()
		})
	}
}
