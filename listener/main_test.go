package listener

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// testdb keeps one administrative pool for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// waitTimeout bounds every wait on a condition; generous, since the test
// machine is shared and slow.
const waitTimeout = 15 * time.Second

// newDB returns a fresh migrated database.
func newDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := migrations.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	// No runtime records itself asleep here: these listeners want every
	// notification, as any program that LISTENs by itself does.
	_, err = db.Pool.Exec(context.Background(), `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'listener-test')`)
	require.NoError(t, err)
	return db
}

// testLogger logs to the test and records entries for assertions.
func testLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	tl := zaptest.NewLogger(t, zaptest.Level(zapcore.DebugLevel))
	return zap.New(zapcore.NewTee(tl.Core(), core)), logs
}

// start runs src until the test ends, then requires Run to return nil.
func start(t *testing.T, src Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Error("Run did not return after its context was cancelled")
		}
	})
}

// waitReady waits for src to be ready and removes the catch-up wake it sends.
func waitReady(t *testing.T, src Source) {
	t.Helper()
	select {
	case <-src.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("source never became ready")
	}
	waitWake(t, src, "the catch-up wake after connecting")
}

func waitWake(t *testing.T, src Source, what string) {
	t.Helper()
	select {
	case <-src.Wakes():
	case <-time.After(waitTimeout):
		t.Fatalf("no wake: expected %s", what)
	}
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, timeout, what, cond)
}

func exec(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// rawListener is a plain connection LISTENing on a channel, to count exactly
// what the trigger sends.
type rawListener struct {
	t    *testing.T
	conn *pgx.Conn
}

func listenRaw(t *testing.T, db *testdb.DB, ch string) *rawListener {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize())
	require.NoError(t, err)
	return &rawListener{t: t, conn: conn}
}

// untilMarker sends a marker notification on ch after everything before it
// committed, and returns the payloads received before the marker: since
// notifications arrive in commit order, that is all the earlier statements sent.
func (r *rawListener) untilMarker(db *testdb.DB, ch string) []string {
	r.t.Helper()
	exec(r.t, db, "SELECT pg_notify($1, 'marker')", ch)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		n, err := r.conn.WaitForNotification(ctx)
		cancel()
		require.NoError(r.t, err)
		if n.Payload == "marker" {
			return got
		}
		got = append(got, n.Payload)
	}
}

// ownCluster starts a throwaway PostgreSQL for a test that must restart,
// stop or reconfigure its server, so the shared one is never disturbed. It
// skips with -short and fails under the test command when PostgreSQL's
// server binaries are missing.
func ownCluster(t *testing.T, ctx context.Context, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster of its own; skipped with -short")
	}
	logger, _ := testLogger(t)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Settings: settings, Fast: true, Logger: logger})
	if errors.Is(err, pgcluster.ErrNotInstalled) {
		testdb.Missing(t, "cannot start a cluster: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Close()) })
	return cluster
}

// migratedPool opens a pool on dsn, closed when the test ends, and migrates
// its database.
func migratedPool(t *testing.T, ctx context.Context, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = migrations.Migrate(ctx, pool)
	require.NoError(t, err)
	return pool
}
