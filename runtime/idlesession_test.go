package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/runtime"
)

// A database that ends idle sessions (idle_session_timeout, here 300 ms)
// ends the pooled connections of a worker that waits: each job that comes
// after a quiet spell is still picked up by its notification, and no
// statement of the worker meets a connection the server ended (before,
// the claim by id and the claims after it failed on them, were logged,
// and the job waited for a backoff).
func TestPickupAfterTheDatabaseEndedIdleSessions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	db.NeedsVersion(t, 14, "idle_session_timeout")
	db.SetDefault(t, "idle_session_timeout", "300ms")
	ran := make(chan int64, 10)
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(_ context.Context, j *runtime.Job) error {
		ran <- j.ID
		return nil
	}})
	cfg.Logger = zap.New(core)
	start(t, cfg)
	ctx := context.Background()
	for i := range 3 {
		time.Sleep(time.Second) // more than three of the server's timeouts
		// The test's own sessions are ended too: a fresh one each time.
		conn, err := pgx.Connect(ctx, db.DirectDSN)
		require.NoError(t, err)
		var id int64
		require.NoError(t, conn.QueryRow(ctx, "INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id").Scan(&id))
		require.NoError(t, conn.Close(ctx))
		require.Equal(t, id, within(t, ran, fmt.Sprintf("the job after quiet spell %d", i+1)))
	}
	for _, e := range logs.All() {
		t.Errorf("%s: %s %v", e.Level, e.Message, e.ContextMap())
	}
}
