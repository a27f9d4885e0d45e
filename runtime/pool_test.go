package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// Handlers that hold every connection of the pool given as Config.Pool,
// for several leases, must not starve the runtime's heartbeats: no lease
// expires while its handler runs, and each job runs once.
func TestSharedPoolHeldByHandlersDoesNotStarveHeartbeats(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	pc, err := pgconfig.Pool(db.DSN)
	require.NoError(t, err)
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	defer pool.Close()
	lease := 2 * time.Second
	hold := 2 * lease
	cfg := baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		_, err = conn.Exec(ctx, "SELECT pg_sleep($1::float8)", hold.Seconds())
		return err
	}})
	cfg.DSN, cfg.Pool = "", pool
	cfg.Lease = lease
	cfg.Concurrency = 2
	rt := start(t, cfg)
	_, err = runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{{Kind: "hold"}, {Kind: "hold"}})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "all completed", func() bool { return countState(t, db, "completed") == 2 })
	require.Zero(t, rt.Stats().LeaseLost)
	var again int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE attempts > 1").Scan(&again))
	require.Zero(t, again, "a lease expired while its handler held or waited for a connection")
}

// With only a Pool given, the listener connects with the pool's own
// connection string.
func TestPoolAloneDefaultsTheListenDSN(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer pool.Close()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.DSN, cfg.ListenDSN, cfg.Pool = "", "", pool
	rt := start(t, cfg)
	require.True(t, rt.Stats().Healthy, "the listener is up on the pool's connection string")
}
