package runtime_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// A ListenDSN that leads to PgBouncer makes Run fail at once with one error
// that says what to do, instead of listening to nothing.
func TestListenDSNThroughPgBouncerFailsRun(t *testing.T) {
	t.Parallel()
	const pgbouncerAddr = "127.0.0.1:6432"
	pb := os.Getenv("FILA_TEST_PGBOUNCER_URL")
	if pb == "" {
		c, err := net.DialTimeout("tcp", pgbouncerAddr, time.Second)
		if err != nil {
			testdb.Missing(t, "no PgBouncer answers at %s (scripts/setup.sh starts one): %v", pgbouncerAddr, err)
		}
		_ = c.Close()
		pb = "postgres://postgres@" + pgbouncerAddr + "/postgres"
	}
	db := newDB(t)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.ListenDSN = testdb.WithDatabase(t, pb, db.Name)
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = rt.Run(ctx)
	took := time.Since(start)
	require.Error(t, err)
	require.True(t, errors.Is(err, listener.ErrPooler), "got %v", err)
	require.Contains(t, err.Error(), "ListenDSN")
	require.Contains(t, err.Error(), "PostgreSQL directly")
	require.Less(t, took, 30*time.Second, "Run must fail promptly, not retry")
	select {
	case <-rt.Ready():
		t.Fatal("Ready closed although nothing listens")
	default:
	}
	t.Logf("Run failed after %s: %v", took.Round(time.Millisecond), err)
}

// A Config.Pool with pgx's defaults (a cached prepared statement per
// query) through PgBouncer in transaction mode: the prepare and the
// execution of one statement may reach different server connections, and
// the runtime's own statements must not depend on them being the same.
// Round robin over two server connections makes them differ every time.
func TestPoolOfPgxDefaultsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, err := url.Parse(db.DirectDSN)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{
		UpstreamHost: u.Hostname(), UpstreamPort: port, PoolSize: 2,
		Settings: map[string]string{"server_round_robin": "1"},
		Logger:   zaptest.NewLogger(t),
	})
	if errors.Is(err, pgbouncer.ErrNotInstalled) {
		testdb.Missing(t, "%v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	pc, err := pgxpool.ParseConfig(b.DSN(db.Name))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheStatement, pc.ConnConfig.DefaultQueryExecMode, "pgx's default")
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Two transactions at once open both server connections.
	var txs []pgx.Tx
	for range 2 {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1", pgx.QueryExecModeExec)
		require.NoError(t, err)
		txs = append(txs, tx)
	}
	var servers [2]int32
	for i, tx := range txs {
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeExec).Scan(&servers[i]))
		require.NoError(t, tx.Commit(ctx))
	}
	require.NotEqual(t, servers[0], servers[1], "two server connections")

	ran := make(chan int64, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(_ context.Context, job *runtime.Job) error {
		ran <- job.ID
		return nil
	}})
	cfg.DSN, cfg.Pool = "", pool
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	select {
	case <-rt.Ready():
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("not ready within 2 minutes")
	}
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, "INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id").Scan(&id))
	select {
	case got := <-ran:
		require.Equal(t, id, got)
	case err := <-done:
		t.Fatalf("Run ended before the job ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the job did not run within 2 minutes")
	}
	require.Eventually(t, func() bool {
		s, _, _ := jobState(t, db, id)
		return s == "completed"
	}, time.Minute, 20*time.Millisecond, "the outcome is written through PgBouncer")
	stop()
	require.NoError(t, <-done)
}
