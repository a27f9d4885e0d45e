package runtime_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// span is one handler run of a key.
type span struct {
	key        string
	start, end time.Time
}

// maxOverlap is the largest number of spans of one key running at one
// instant.
func maxOverlap(spans []span) map[string]int {
	type edge struct {
		at    time.Time
		delta int
	}
	byKey := map[string][]edge{}
	for _, s := range spans {
		byKey[s.key] = append(byKey[s.key], edge{s.start, +1}, edge{s.end, -1})
	}
	out := map[string]int{}
	for k, es := range byKey {
		// Ends before starts at the same instant: touching runs do not overlap.
		sort.Slice(es, func(i, j int) bool {
			if es[i].at.Equal(es[j].at) {
				return es[i].delta < es[j].delta
			}
			return es[i].at.Before(es[j].at)
		})
		n := 0
		for _, e := range es {
			n += e.delta
			out[k] = max(out[k], n)
		}
	}
	return out
}

// With a limit of 2 per key and six runtimes, at no instant do more than two
// jobs of one key run, every job completes, and no claim waits on a lock.
func TestConcurrencyLimitHoldsAcrossRuntimes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var spans []span
	var unlimited atomic.Int32
	kinds := func() []runtime.Kind {
		return []runtime.Kind{
			{Name: "import", Limit: &runtime.Limit{Max: 2, Key: "account.id"},
				Handler: func(ctx context.Context, j *runtime.Job) error {
					var p struct{ Account struct{ ID int } }
					if err := j.Decode(&p); err != nil {
						return err
					}
					start := time.Now()
					time.Sleep(30 * time.Millisecond)
					mu.Lock()
					spans = append(spans, span{fmt.Sprint(p.Account.ID), start, time.Now()})
					mu.Unlock()
					return nil
				}},
			{Name: "other", Handler: func(context.Context, *runtime.Job) error { unlimited.Add(1); return nil }},
		}
	}
	for w := 0; w < 6; w++ {
		cfg := baseConfig(t, db, kinds()...)
		cfg.Concurrency = 5
		start(t, cfg)
	}
	var params []runtime.InsertParams
	for i := 0; i < 60; i++ {
		params = append(params, runtime.InsertParams{Kind: "import", Payload: map[string]any{"account": map[string]int{"id": i % 3}}})
	}
	for i := 0; i < 20; i++ {
		params = append(params, runtime.InsertParams{Kind: "other"})
	}
	stopSampling := sampleLockWaits(t, db)
	_, err := runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "all 80 completed", func() bool { return countState(t, db, "completed") == 80 })
	require.Zero(t, stopSampling(), "a claim waited on a row lock")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, spans, 60)
	for key, n := range maxOverlap(spans) {
		require.LessOrEqual(t, n, 2, "key %s had %d jobs running at once", key, n)
		require.Equal(t, 2, n, "key %s never used both its slots: the limit is stricter than asked", key)
	}
	require.EqualValues(t, 20, unlimited.Load())
}

// A paused queue runs nothing, though its workers are woken and claim, until
// it is resumed; then its jobs start at once.
func TestPausedQueueRunsNothingUntilResumed(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	obs := newRecordingObserver()
	var ran atomic.Int32
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error {
		ran.Add(1)
		return nil
	}})
	cfg.Observer = obs
	start(t, cfg)
	require.NoError(t, runtime.PauseQueue(ctx, db.Pool, "default"))
	paused, err := runtime.PausedQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, paused)
	obs.mu.Lock()
	before := obs.wakes[runtime.WakeNotify]
	obs.mu.Unlock()
	for i := 0; i < 3; i++ {
		_, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
		require.NoError(t, err)
	}
	waitFor(t, 10*time.Second, "the worker claimed after the inserts", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.wakes[runtime.WakeNotify] > before
	})
	require.Zero(t, ran.Load(), "a job of a paused queue ran")
	require.Equal(t, 3, countState(t, db, "pending"))

	resumed, err := runtime.ResumeQueue(ctx, db.Pool, "default")
	require.NoError(t, err)
	require.True(t, resumed)
	waitFor(t, 10*time.Second, "the jobs ran once the queue was resumed", func() bool { return countState(t, db, "completed") == 3 })
	again, err := runtime.ResumeQueue(ctx, db.Pool, "default")
	require.NoError(t, err)
	require.False(t, again, "a queue that is not paused is not resumed")
	require.Error(t, runtime.PauseQueue(ctx, db.Pool, "bad queue"))
}
