package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

// A queue added to a running runtime has its series like one given at the
// start: its wake-ups by notification, its claims and its pickup latency.
func TestAddedQueueIsInTheMetrics(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	m := metrics.New(metrics.Options{Logger: zaptest.NewLogger(t)})
	done := make(chan int64, 1)
	rt := start(t, runtime.Config{
		DSN: db.DSN, ListenDSN: db.DirectDSN, Observer: m, Logger: zaptest.NewLogger(t), SafetyPoll: time.Minute,
		Kinds: []runtime.Kind{{Name: "ok", Handler: func(_ context.Context, j *runtime.Job) error { done <- j.ID; return nil }}},
	})
	m.Attach(rt)
	url := serve(t, m)

	require.NoError(t, rt.AddQueue(ctx, "extra", runtime.QueueConfig{}))
	id, err := runtime.Insert(ctx, db.Pool, "ok", nil, &runtime.InsertOpts{Queue: "extra"})
	require.NoError(t, err)
	select {
	case got := <-done:
		require.Equal(t, id, got)
	case <-time.After(20 * time.Second):
		t.Fatal("job of the added queue not run")
	}
	f := scrape(t, url)
	require.GreaterOrEqual(t, f.value(t, "fila_wakeups_total", "queue", "extra", "reason", "notify"), 1.0)
	require.Equal(t, 1.0, f.value(t, "fila_claimed_jobs_total", "queue", "extra"))
	require.EqualValues(t, 1, f.histogram(t, "fila_pickup_latency_seconds", "queue", "extra").GetSampleCount())
}
