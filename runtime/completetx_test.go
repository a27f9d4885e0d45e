package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A heartbeat that runs after a handler committed CompleteTx but before the
// handler returned finds the job no longer running and cancels the handler.
// The job is completed all the same: it must count as completed, not as a
// lost lease.
func TestCompleteTxThenHeartbeatIsNotALostLease(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cancelled := make(chan error, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(hctx context.Context, j *runtime.Job) error {
		if err := pgx.BeginFunc(hctx, db.Pool, func(tx pgx.Tx) error { return runtime.CompleteTx(hctx, tx, j) }); err != nil {
			return err
		}
		select { // the next heartbeat finds the row completed
		case <-hctx.Done():
			cancelled <- context.Cause(hctx)
		case <-time.After(10 * time.Second):
			cancelled <- nil
		}
		return nil
	}})
	cfg.Lease = runtime.LeaseMin
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	require.ErrorIs(t, <-cancelled, runtime.ErrLeaseLost, "the heartbeat cancels a handler whose row is no longer running")
	waitFor(t, 5*time.Second, "the runtime counted the job", func() bool {
		s := rt.Stats()
		return s.Completed+s.LeaseLost > 0
	})
	s := rt.Stats()
	require.Equal(t, uint64(1), s.Completed)
	require.Zero(t, s.LeaseLost)
	state, attempts, _ := jobState(t, db, id)
	require.Equal(t, "completed", state)
	require.Equal(t, 1, attempts)
}
