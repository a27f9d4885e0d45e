package listener

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgcluster"
)

// TestSourcesSurvivePostgresRestart crashes and restarts a PostgreSQL of the
// test's own, so the shared one is never disturbed.
func TestSourcesSurvivePostgresRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := ownCluster(t, ctx, nil)
	dsn := cluster.DSN("postgres")
	pool := migratedPool(t, ctx, dsn)
	_, err := pool.Exec(ctx, `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'listener-test')`)
	require.NoError(t, err)

	l := newListener(t, Config{DSN: dsn, ReconnectMax: 500 * time.Millisecond})
	w := newWAL(t, WALConfig{DSN: dsn, ReconnectMax: 500 * time.Millisecond})
	sources := []Source{l, w}
	for _, s := range sources {
		start(t, s)
		waitReady(t, s)
	}

	require.NoError(t, cluster.Stop(pgcluster.ModeImmediate))
	for _, s := range sources {
		waitFor(t, waitTimeout, "the source to notice the crash", func() bool { return !s.Healthy() })
		drain(s.Wakes())
	}
	require.NoError(t, cluster.Start(ctx))
	for _, s := range sources {
		waitFor(t, 2*waitTimeout, "the source to recover", s.Healthy)
		waitWake(t, s, "the catch-up wake after the restart")
	}
	require.Equal(t, uint64(1), l.Stats().Reconnects)
	require.Equal(t, uint64(1), w.Stats().Reconnects)

	pool.Reset() // its connections died with the server
	_, err = pool.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('after restart')")
	require.NoError(t, err)
	for _, s := range sources {
		waitWake(t, s, "a wake for an insert after the restart")
	}
}
