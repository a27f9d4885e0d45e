package filatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

// WaitForEvent returns the event waited for, and fails the test, naming
// the events it read meanwhile, when that event does not come.
func TestWaitForEvent(t *testing.T) {
	t.Parallel()
	db := filatest.NewDB(t)
	rt, err := runtime.New(runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Logger: zaptest.NewLogger(t),
		Kinds: []runtime.Kind{{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }}}})
	require.NoError(t, err)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{})
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
		require.NoError(t, <-errc)
	})
	ctx := context.Background()
	first, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	ev := filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, first))
	require.Equal(t, first, ev.Job.ID)
	row, err := runtime.GetJob(ctx, db.Pool, first)
	require.NoError(t, err)
	require.Equal(t, "completed", row.State)

	second, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	failure := fails(t, func(tb testing.TB) {
		filatest.WaitForEvent(tb, sub, time.Second, filatest.JobEvent(runtime.EventDead, second))
	})
	require.Contains(t, failure, "no event as waited for within 1s")
	require.Contains(t, failure, "completed of job")
}
