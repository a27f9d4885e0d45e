package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// With unique states of pending only (one queued while one runs), a job of
// the same key enqueued while the first runs takes the key. The first's
// retry then finds it taken: it is cancelled, the newer job runs instead,
// and the worker's other outcomes are written as usual.
func TestRetryOfAJobWhoseKeyWasTakenDoesNotWedgeTheWorker(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var syncRuns atomic.Int32
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "sync", Handler: func(ctx context.Context, j *runtime.Job) error {
			if syncRuns.Add(1) == 1 {
				started <- struct{}{}
				<-release
				return errors.New("upstream busy")
			}
			return nil
		}},
		runtime.Kind{Name: "noop", Handler: func(context.Context, *runtime.Job) error { return nil }},
	)
	start(t, cfg)
	opts := &runtime.InsertOpts{UniqueKey: "acct:7", UniqueStates: []string{"pending"}}
	first, err := runtime.Insert(ctx, db.Pool, "sync", nil, opts)
	require.NoError(t, err)
	within(t, started, "the first job started")
	// Due in a second, so that it still waits, pending, holding the key,
	// when the first job's retry is written.
	later := *opts
	later.RunAt = time.Now().Add(time.Second)
	res, err := runtime.InsertJob(ctx, db.Pool, "sync", nil, &later)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the key is free while its job runs")
	close(release)
	var noops []runtime.InsertParams
	for range 20 {
		noops = append(noops, runtime.InsertParams{Kind: "noop"})
	}
	_, err = runtime.InsertMany(ctx, db.Pool, noops)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "everything settled", func() bool {
		return countState(t, db, "completed") == 21 && countState(t, db, "cancelled") == 1
	})
	st, _, le := jobState(t, db, first)
	require.Equal(t, "cancelled", st)
	require.Contains(t, le, "upstream busy")
	require.Contains(t, le, "which runs instead")
	st, _, _ = jobState(t, db, res.ID)
	require.Equal(t, "completed", st)
}
