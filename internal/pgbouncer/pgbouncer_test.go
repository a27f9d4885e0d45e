package pgbouncer_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sync/errgroup"

	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgxpool's background health check of the shared admin pool in testdb.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

// start runs a bouncer in front of the database's PostgreSQL.
func start(t *testing.T, db *testdb.DB, opts pgbouncer.Options) *pgbouncer.Bouncer {
	t.Helper()
	u, err := url.Parse(db.DirectDSN)
	require.NoError(t, err)
	opts.UpstreamHost = u.Hostname()
	opts.UpstreamPort, err = strconv.Atoi(u.Port())
	require.NoError(t, err)
	opts.Logger = zaptest.NewLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.LogTail())
		}
		require.NoError(t, b.Close())
	})
	return b
}

func pool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgconfig.Pool(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 10
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func selectOne(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var n int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&n)
}

func TestManyTransactions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	b := start(t, db, pgbouncer.Options{PoolSize: 3})
	p := pool(t, b.DSN(db.Name))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := p.Exec(ctx, "CREATE TABLE hits (worker int, n int)")
	require.NoError(t, err)
	// 10 clients share 3 server connections: each transaction must see its
	// own writes, and every one of them must land.
	const workers, txPerWorker = 10, 30
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			for i := range txPerWorker {
				err := pgx.BeginFunc(gctx, p, func(tx pgx.Tx) error {
					if _, err := tx.Exec(gctx, "INSERT INTO hits VALUES ($1, $2)", w, i); err != nil {
						return err
					}
					var mine int
					if err := tx.QueryRow(gctx, "SELECT count(*) FROM hits WHERE worker = $1", w).Scan(&mine); err != nil {
						return err
					}
					if mine != i+1 {
						return fmt.Errorf("worker %d sees %d rows of its own after %d inserts", w, mine, i+1)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	var total int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM hits").Scan(&total))
	require.Equal(t, workers*txPerWorker, total)

	// The admin console shows the pool in transaction mode, capped at 3
	// server connections.
	admin, err := pgconn.Connect(ctx, b.DSN("pgbouncer"))
	require.NoError(t, err)
	defer admin.Close(ctx)
	res, err := admin.Exec(ctx, "SHOW POOLS").ReadAll()
	require.NoError(t, err)
	require.Len(t, res, 1)
	col := map[string]int{}
	for i, f := range res[0].FieldDescriptions {
		col[f.Name] = i
	}
	found := false
	for _, row := range res[0].Rows {
		if string(row[col["database"]]) != db.Name {
			continue
		}
		found = true
		require.Equal(t, "transaction", string(row[col["pool_mode"]]))
		active, _ := strconv.Atoi(string(row[col["sv_active"]]))
		idle, _ := strconv.Atoi(string(row[col["sv_idle"]]))
		used, _ := strconv.Atoi(string(row[col["sv_used"]]))
		require.LessOrEqual(t, active+idle+used, 3)
	}
	require.True(t, found, "no pool for %s in SHOW POOLS", db.Name)
}

func TestRestartKeepsPort(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	b := start(t, db, pgbouncer.Options{})
	dsn := b.DSN(db.Name)
	port := b.Port()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, selectOne(ctx, dsn))

	// A connection open across the kill breaks, as with a crashed pooler.
	held, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer held.Close(ctx)
	pid := b.PID()
	require.NoError(t, b.Stop())
	require.Zero(t, b.PID())
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	require.Error(t, selectOne(ctx, dsn), "a stopped bouncer must refuse connections")
	require.Error(t, held.Ping(ctx))

	require.NoError(t, b.Start(ctx))
	require.Equal(t, port, b.Port())
	require.NoError(t, selectOne(ctx, dsn))

	require.NoError(t, b.Restart(ctx))
	require.Equal(t, port, b.Port())
	require.NoError(t, selectOne(ctx, dsn))
}

func TestCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Logger: zaptest.NewLogger(t), UpstreamPort: portOf(t, db.DirectDSN)})
	require.NoError(t, err)
	dir, pid := b.Dir(), b.PID()
	require.DirExists(t, dir)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close is idempotent")
	require.NoDirExists(t, dir)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	require.ErrorIs(t, b.Start(ctx), pgbouncer.ErrClosed)
}

func portOf(t *testing.T, dsn string) int {
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	return port
}

func TestNotInstalled(t *testing.T) {
	t.Parallel()
	_, err := pgbouncer.Start(context.Background(), pgbouncer.Options{Binary: "/nonexistent/pgbouncer"})
	require.ErrorIs(t, err, pgbouncer.ErrNotInstalled)
	require.ErrorContains(t, err, "scripts/setup.sh")
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts pgbouncer.Options
		want string
	}{
		{pgbouncer.Options{Port: -1}, "Port"},
		{pgbouncer.Options{PoolMode: "pipelined"}, "PoolMode"},
		{pgbouncer.Options{PoolSize: -2}, "PoolSize"},
		{pgbouncer.Options{Settings: map[string]string{"listen_port": "1"}}, "listen_port"},
	} {
		require.ErrorContains(t, tc.opts.Validate(), tc.want)
	}
	require.NoError(t, pgbouncer.Options{}.Validate())
	d := pgbouncer.Options{}.WithDefaults()
	require.Equal(t, pgbouncer.PoolModeDefault, d.PoolMode)
	require.Equal(t, pgbouncer.PoolSizeDefault, d.PoolSize)
	require.Equal(t, pgbouncer.MaxClientConnDefault, d.MaxClientConn)
	require.Equal(t, pgbouncer.UpstreamPortDefault, d.UpstreamPort)
}
