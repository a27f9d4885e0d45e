package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

func walLevelLogical(t *testing.T) {
	t.Helper()
	db := testdbNew(t)
	var level string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&level))
	if level != "logical" {
		testdb.Missing(t, "wal_level is %q; scripts/setup.sh sets it to logical", level)
	}
}

func TestWALModePicksUpWithTriggerOff(t *testing.T) {
	t.Parallel()
	walLevelLogical(t)
	db := newDB(t)
	ctx := context.Background()
	require.NoError(t, runtime.SetNotifyTrigger(ctx, db.Pool, false))
	on, err := runtime.NotifyTriggerOn(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, on)
	ran := make(chan int64, 10)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { ran <- j.ID; return nil }})
	cfg.Mode = runtime.ModeWAL
	start(t, cfg)
	for i := 0; i < 3; i++ {
		id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
		require.NoError(t, err)
		select {
		case got := <-ran:
			require.Equal(t, id, got)
		case <-time.After(10 * time.Second):
			t.Fatal("WAL mode did not pick the job up (trigger off, safety poll 10 minutes)")
		}
	}
	require.NoError(t, runtime.SetNotifyTrigger(ctx, db.Pool, true))
	on, err = runtime.NotifyTriggerOn(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, on)
}

// A WAL wake whose claim finds nothing is followed by two rechecks (the
// stream can deliver a commit a moment before other snapshots see it), and
// no more: a job scheduled an hour ahead wakes the queue and is rechecked
// twice, then left to its timer.
func TestWALWakeRechecksAnEmptyClaim(t *testing.T) {
	t.Parallel()
	walLevelLogical(t)
	db := newDB(t)
	ctx := context.Background()
	require.NoError(t, runtime.SetNotifyTrigger(ctx, db.Pool, false))
	obs := newRecordingObserver()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: noop})
	cfg.Mode = runtime.ModeWAL
	cfg.Observer = obs
	start(t, cfg)
	wakes := func(r runtime.WakeReason) int {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.wakes[r]
	}
	// The stream wakes every queue when it connects, and that wake's empty
	// claim is rechecked too: start counting once the worker is quiet.
	all := func() int { return wakes(runtime.WakeWAL) + wakes(runtime.WakePoll) + wakes(runtime.WakeTimer) }
	// Quiet is the absence of wakes, which no event announces: no wake
	// for three times the longest recheck delay (100 ms).
	waitFor(t, 10*time.Second, "the worker quiet after its start", func() bool {
		before := all()
		time.Sleep(300 * time.Millisecond)
		return all() == before
	})
	polls, wals := wakes(runtime.WakePoll), wakes(runtime.WakeWAL)
	_, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the WAL wake for the insert", func() bool { return wakes(runtime.WakeWAL) > wals })
	waitFor(t, 5*time.Second, "two rechecks after the empty claim", func() bool { return wakes(runtime.WakePoll) >= polls+2 })
	// A third recheck would come on a timer the second armed, and nothing
	// shows a timer not armed: only waiting past the longest delay can.
	// A marker job would not do: the claim that found it stops the timer.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, polls+2, wakes(runtime.WakePoll), "the rechecks went on")
	require.Equal(t, 1, countState(t, db, "pending"))
}
