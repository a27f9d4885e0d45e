package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A sleeping worker claims the job its notification names by that job's
// id, and reads the queue's head for the rest: every job of a multi-row
// insert runs, a job of a kind with a concurrency limit goes through the
// head's slot checks, and a job scheduled a moment ahead (its insert
// notifies too) does not start early.
func TestNotifiedJobClaimedByID(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		started = map[int64]time.Time{}
	)
	record := func(_ context.Context, j *runtime.Job) error {
		mu.Lock()
		defer mu.Unlock()
		started[j.ID] = time.Now()
		return nil
	}
	ran := func(ids ...int64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if _, ok := started[id]; !ok {
					return false
				}
			}
			return true
		}
	}
	obs := newRecordingObserver()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "k", Handler: record},
		runtime.Kind{Name: "limited", Handler: record, Limit: &runtime.Limit{Max: 1}})
	cfg.Observer = obs
	rt := start(t, cfg)
	wakes := func() int {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		n := 0
		for _, k := range obs.wakes {
			n += k
		}
		return n
	}
	// Asleep, and done with the claim that follows falling asleep (which
	// would take a job committed meanwhile from the head): its row is in
	// fila_sleepers and it has not claimed for a while.
	asleep := func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_sleepers WHERE queue = 'default'`).Scan(&n))
		if n != 1 {
			return false
		}
		// Done claiming leaves no trace (the claim that follows falling
		// asleep and one a finished job may start look alike from here):
		// no wake for a while is the only sign.
		before := wakes()
		time.Sleep(150 * time.Millisecond)
		return wakes() == before
	}
	waitFor(t, 10*time.Second, "the worker sleeps on its queue", asleep)

	one, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the notified job ran", ran(one))
	require.Equal(t, uint64(1), rt.Stats().ClaimedByID, "the notified job was claimed from the queue's head")

	waitFor(t, 10*time.Second, "the worker sleeps again", asleep)
	lim, err := runtime.Insert(ctx, db.Pool, "limited", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the limited job ran", ran(lim))
	require.Equal(t, uint64(1), rt.Stats().ClaimedByID, "a limited kind's job was claimed by id, past its slot check")

	// One statement, one notification naming its first job.
	rows, err := db.Pool.Query(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, 5) RETURNING id`)
	require.NoError(t, err)
	var many []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		many = append(many, id)
	}
	require.NoError(t, rows.Err())
	waitFor(t, 10*time.Second, "every job of the multi-row insert ran", ran(many...))

	waitFor(t, 10*time.Second, "the worker sleeps again", asleep)
	runAt := time.Now().Add(700 * time.Millisecond)
	later, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{RunAt: runAt})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the scheduled job ran", ran(later))
	mu.Lock()
	defer mu.Unlock()
	require.False(t, started[later].Before(runAt.Add(-50*time.Millisecond)),
		"a job scheduled for %v started at %v", runAt, started[later])
}
