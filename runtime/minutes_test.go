package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// What a worker did is in fila_minutes once it stops (and every maintenance tick
// while it runs): completions and failures per queue, and the pickup
// latency histogram of the jobs it claimed.
func TestMinutesRecordWhatWorkersDid(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "ok", Handler: noop},
		runtime.Kind{Name: "bad", Handler: func(context.Context, *runtime.Job) error { return runtime.Permanent(errors.New("no")) }},
	)
	cfg.Queues = []string{"default", "other"}
	for i := 0; i < 2; i++ {
		rt := start(t, cfg)
		var params []runtime.InsertParams
		for j := 0; j < 5; j++ {
			params = append(params, runtime.InsertParams{Kind: "ok"}, runtime.InsertParams{Kind: "ok", InsertOpts: runtime.InsertOpts{Queue: "other"}})
		}
		params = append(params, runtime.InsertParams{Kind: "bad"})
		_, err := runtime.InsertMany(ctx, db.Pool, params)
		require.NoError(t, err)
		waitFor(t, 10*time.Second, "all settled", func() bool { return countState(t, db, "pending")+countState(t, db, "running") == 0 })
		require.NoError(t, rt.Stop(ctx))
	}
	ms, err := runtime.Minutes(ctx, db.Pool, time.Hour)
	require.NoError(t, err)
	byQueue := map[string]runtime.MinuteStats{}
	for _, m := range ms {
		prev := byQueue[m.Queue]
		prev.Completed += m.Completed
		prev.Failed += m.Failed
		prev.Pickups += m.Pickups
		byQueue[m.Queue] = prev
		require.Len(t, m.PickupBuckets, len(runtime.PickupBuckets)+1)
		require.Positive(t, m.PickupQuantile(0.5))
		require.LessOrEqual(t, m.PickupQuantile(0.5), m.PickupQuantile(0.99))
	}
	require.EqualValues(t, 10, byQueue["default"].Completed)
	require.EqualValues(t, 2, byQueue["default"].Failed)
	require.EqualValues(t, 12, byQueue["default"].Pickups)
	require.EqualValues(t, 10, byQueue["other"].Completed)
	require.EqualValues(t, 10, byQueue["other"].Pickups)
}

func TestPickupQuantile(t *testing.T) {
	t.Parallel()
	b := make([]int64, len(runtime.PickupBuckets)+1)
	b[1], b[4], b[len(b)-1] = 90, 9, 1 // 90 within 2 ms, 9 within 20 ms, 1 slower than a minute
	m := runtime.MinuteStats{Pickups: 100, PickupBuckets: b}
	require.Equal(t, 2*time.Millisecond, m.PickupQuantile(0.5))
	require.Equal(t, 20*time.Millisecond, m.PickupQuantile(0.95))
	require.Equal(t, 2*time.Minute, m.PickupQuantile(1))
	require.Zero(t, runtime.MinuteStats{}.PickupQuantile(0.5))
}
