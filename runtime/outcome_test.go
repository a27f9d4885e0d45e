package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A handler that snoozes puts its job back, due later, without spending an
// attempt: a job of one attempt snoozes twice and then completes, at its
// first attempt, with no error recorded.
func TestSnoozeDoesNotSpendAnAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var runs atomic.Int32
	var mu sync.Mutex
	var starts []time.Time
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		assert.Equal(t, 1, j.Attempt, "a snoozed attempt is given back")
		if runs.Add(1) <= 2 {
			return runtime.Snooze(200 * time.Millisecond)
		}
		return nil
	}})
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the job completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	st, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, "completed", st)
	require.Equal(t, 1, attempts)
	require.Empty(t, lastErr)
	var errs string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&errs))
	require.Equal(t, "[]", errs)
	require.EqualValues(t, 3, runs.Load())
	require.EqualValues(t, 2, rt.Stats().Snoozed)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 200*time.Millisecond, "run %d came before its snooze ended", i)
	}
}

// A failure with RetryAfter is retried after the handler's delay, not the
// backoff (20 ms here), and counts as an attempt: with max_attempts 2 the
// second failure is dead.
func TestRetryAfterSetsTheDelayAndCounts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var starts []time.Time
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return runtime.RetryAfter(errors.New("upstream said 429"), 400*time.Millisecond)
	}})
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the job is dead", func() bool { s, _, _ := jobState(t, db, id); return s == "dead" })
	_, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, 2, attempts)
	require.Contains(t, lastErr, "upstream said 429")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, starts, 2)
	require.GreaterOrEqual(t, starts[1].Sub(starts[0]), 400*time.Millisecond, "the retry came before the handler's Retry-After")
}

// A handler's output is stored with its completion, by the runtime or by
// CompleteTx in the handler's transaction; a failed attempt's is not; one
// over OutputMax is refused by SetOutput.
func TestHandlerOutputIsStoredWithTheCompletion(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "out", Handler: func(ctx context.Context, j *runtime.Job) error {
			assert.ErrorIs(t, j.SetOutput(strings.Repeat("x", runtime.OutputMax)), runtime.ErrOutputTooLarge)
			return j.SetOutput(map[string]any{"rows": 42, "file": "a.csv"})
		}},
		runtime.Kind{Name: "intx", Handler: func(ctx context.Context, j *runtime.Job) error {
			if err := j.SetOutput([]int{1, 2, 3}); err != nil {
				return err
			}
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if err := runtime.CompleteTx(ctx, tx, j); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
		runtime.Kind{Name: "fails", Handler: func(ctx context.Context, j *runtime.Job) error {
			_ = j.SetOutput("half done")
			return runtime.Permanent(errors.New("no"))
		}},
	)
	start(t, cfg)
	ids := map[string]int64{}
	for _, k := range []string{"out", "intx", "fails"} {
		id, err := runtime.Insert(ctx, db.Pool, k, nil, nil)
		require.NoError(t, err)
		ids[k] = id
	}
	waitFor(t, 10*time.Second, "every job finished", func() bool {
		return countState(t, db, "completed") == 2 && countState(t, db, "dead") == 1
	})
	output := func(id int64) *string {
		var o *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT output::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&o))
		return o
	}
	require.JSONEq(t, `{"rows": 42, "file": "a.csv"}`, *output(ids["out"]))
	require.JSONEq(t, `[1, 2, 3]`, *output(ids["intx"]))
	require.Nil(t, output(ids["fails"]))
}
