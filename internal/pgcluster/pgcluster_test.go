package pgcluster_test

import (
	"context"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	opts.Logger = zaptest.NewLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, opts)
	require.NoError(t, err)
	dir := c.Dir()
	require.DirExists(t, dir)
	t.Cleanup(func() {
		// Every test also checks that Close leaves nothing behind.
		pid := c.PID()
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")
		require.NoDirExists(t, dir)
		if pid != 0 {
			require.False(t, alive(pid), "postmaster %d still running after Close", pid)
		}
		require.ErrorIs(t, c.Start(context.Background()), pgcluster.ErrClosed)
	})
	return c
}

func query(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var s string
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&s))
	return s
}

func exec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestRestartKeepsDataAndPort(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{})
	dsn := c.DSN("postgres")
	port := c.Port()
	require.NotZero(t, port)
	require.Equal(t, "logical", query(t, dsn, "SHOW wal_level"))
	require.Equal(t, "on", query(t, dsn, "SHOW fsync"))
	require.Equal(t, "10", query(t, dsn, "SHOW max_replication_slots"))
	require.Equal(t, "127.0.0.1", query(t, dsn, "SHOW listen_addresses"))

	exec(t, dsn, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restarts')")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, mode := range []string{pgcluster.ModeFast, pgcluster.ModeImmediate, pgcluster.ModeSmart} {
		oldPID := c.PID()
		require.NoError(t, c.Restart(ctx, mode), mode)
		require.Equal(t, port, c.Port(), mode)
		require.NotEqual(t, oldPID, c.PID(), mode)
		require.False(t, alive(oldPID), "%s: old postmaster still alive", mode)
		require.Equal(t, "before restarts", query(t, dsn, "SELECT v FROM kept"), mode)
		exec(t, dsn, "INSERT INTO kept VALUES ('after "+mode+"')")
	}
	require.Equal(t, "4", query(t, dsn, "SELECT count(*)::text FROM kept"))
}

func TestStopThenStart(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{Fast: true, Settings: map[string]string{"work_mem": "7MB", "wal_level": "replica"}})
	dsn := c.DSN("postgres")
	require.Equal(t, "off", query(t, dsn, "SHOW fsync"))
	require.Equal(t, "7MB", query(t, dsn, "SHOW work_mem"))
	require.Equal(t, "replica", query(t, dsn, "SHOW wal_level"), "Settings override the defaults")

	require.NoError(t, c.Stop(pgcluster.ModeFast))
	require.Zero(t, c.PID())
	require.NoError(t, c.Stop(pgcluster.ModeFast), "stopping a stopped cluster does nothing")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := pgx.Connect(ctx, dsn)
	cancel()
	require.Error(t, err, "a stopped cluster must refuse connections")

	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, c.Start(ctx))
	require.NoError(t, c.Start(ctx), "starting a running cluster does nothing")
	require.Equal(t, "7MB", query(t, dsn, "SHOW work_mem"))
	require.Error(t, c.Stop("graceful"))
}

func TestStartAfterKill(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{Fast: true})
	dsn := c.DSN("postgres")
	exec(t, dsn, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)")
	pid := c.PID()
	// What a fault test does: kill the postmaster without any shutdown.
	// Its backends notice and exit; the next start runs crash recovery.
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for c.PID() != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("killed postmaster still reported running")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Backends of the killed postmaster may hold the shared memory for a
	// moment, so the first starts may fail; Start is retried within ctx.
	var err error
	for {
		if err = c.Start(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no start after the kill: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.Equal(t, "1", query(t, dsn, "SELECT v::text FROM kept"))
}

func TestPortTakenByAnotherServer(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.AdminURL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The shared PostgreSQL answers on this port: Start must not mistake it
	// for its own server.
	c, err := pgcluster.Start(ctx, pgcluster.Options{Port: port, Fast: true})
	require.Error(t, err)
	require.Nil(t, c)
	t.Logf("refused as expected: %v", err)
}

func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := pgcluster.Start(ctx, pgcluster.Options{Port: 70000})
	require.ErrorContains(t, err, "Port")
	_, err = pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"listen_addresses": "*"}})
	require.ErrorContains(t, err, "listen_addresses")
	_, err = pgcluster.Start(ctx, pgcluster.Options{BinDir: t.TempDir()})
	require.ErrorIs(t, err, pgcluster.ErrNotInstalled)
}
