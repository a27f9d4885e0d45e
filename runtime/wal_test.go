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
