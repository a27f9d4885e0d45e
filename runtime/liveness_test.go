package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A worker refreshes its row every LivenessInterval, records the interval
// and the recurring tasks it schedules, writes its row again whole when
// it finds it gone, and removes it at a clean stop.
func TestWorkerRowIsRefreshedEveryLivenessInterval(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.LivenessInterval = time.Second
	cfg.Recurring = []runtime.RecurringTask{{Name: "nightly", Schedule: "0 2 * * *", Kind: "k"}}
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	<-rt.Ready()

	type row struct {
		id        string
		seen      time.Time
		interval  float64
		recurring []string
		live      bool
	}
	read := func() (r row, ok bool) {
		err := db.Pool.QueryRow(ctx, `SELECT id, last_seen_at, extract(epoch FROM liveness_interval)::float8, recurring, fila_worker_live(w)
			FROM fila_workers w`).Scan(&r.id, &r.seen, &r.interval, &r.recurring, &r.live)
		return r, err == nil
	}
	var first row
	waitFor(t, 10*time.Second, "the worker's row", func() bool { var ok bool; first, ok = read(); return ok })
	require.Equal(t, 1.0, first.interval)
	require.Equal(t, []string{"nightly"}, first.recurring)
	require.True(t, first.live)
	// Three refreshes in a row, each within the interval of the previous.
	last := first.seen
	for i := range 3 {
		waitFor(t, 10*time.Second, "the row refreshed", func() bool {
			r, ok := read()
			if ok && r.seen.After(last) {
				require.Less(t, r.seen.Sub(last), 2*time.Second, "refresh %d came late", i)
				last = r.seen
				return true
			}
			return false
		})
	}

	// A row deleted (forgotten after a long absence, or by hand) is
	// written whole again at the next refresh.
	_, err = db.Pool.Exec(ctx, `DELETE FROM fila_workers`)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the row written again", func() bool {
		r, ok := read()
		return ok && r.id == first.id && r.recurring[0] == "nightly" && r.interval == 1
	})

	require.NoError(t, rt.Stop(ctx))
	require.NoError(t, <-errc)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_workers`).Scan(&n))
	require.Zero(t, n, "a clean stop removes the row")
}

// A worker whose row missed three refreshes is not live; one whose row
// is fresh is. The rule is the schema's own, for every reader.
func TestWorkerLiveAfterMissedRefreshes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, last_seen_at) VALUES
		('fresh', 'h', 1, '{default}', '{k}', 'notify', 'up', interval '5 seconds', now() - interval '14 seconds'),
		('gone', 'h', 2, '{default}', '{k}', 'notify', 'up', interval '5 seconds', now() - interval '16 seconds'),
		('old-style', 'h', 3, '{default}', '{k}', 'notify', 'up', DEFAULT, now() - interval '14 minutes')`)
	require.NoError(t, err)
	rows, err := db.Pool.Query(ctx, `SELECT id FROM fila_workers w WHERE fila_worker_live(w) ORDER BY id`)
	require.NoError(t, err)
	var live []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		live = append(live, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"fresh", "old-style"}, live, "a row written before migration 0020 keeps the five minutes its worker refreshed it at")
}

// Every claim records the worker that owns the attempt, by the id of its
// row in fila_workers; a finished job keeps the worker of its last
// attempt (claimer's tests cover each way of claiming).
func TestClaimRecordsTheOwningWorker(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	release := make(chan struct{})
	cfg := baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, _ *runtime.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}})
	early, err := runtime.Insert(ctx, db.Pool, "hold", nil, nil)
	require.NoError(t, err)
	start(t, cfg)
	late, err := runtime.Insert(ctx, db.Pool, "hold", nil, nil)
	require.NoError(t, err)
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM fila_workers`).Scan(&id))
	for _, job := range []int64{early, late} {
		waitFor(t, 10*time.Second, "the job running", func() bool {
			var state string
			var worker *string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, worker FROM fila_jobs WHERE id = $1`, job).Scan(&state, &worker))
			if state != "running" {
				return false
			}
			require.NotNil(t, worker, "job %d", job)
			require.Equal(t, id, *worker, "job %d", job)
			return true
		})
	}
	close(release)
	waitFor(t, 10*time.Second, "both completed, keeping their worker", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'completed' AND worker = $1`, id).Scan(&n))
		return n == 2
	})
}
