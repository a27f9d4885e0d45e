package migrations_test

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// An application migrates with its own pool, opened with pgx's defaults
// (prepared statements, cached per connection), through PgBouncer in
// transaction mode: each transaction may land on another server
// connection, so a statement pgx believes prepared may be missing there,
// or one it prepares may exist already. Migrate, Version, Check and
// Rollback must work anyway, from several pools at once.
func TestMigrateThroughPgBouncerWithPgxDefaults(t *testing.T) {
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
	db := testdb.New(t)
	ctx := context.Background()
	dsn := testdb.WithDatabase(t, pb, db.Name)
	var wg sync.WaitGroup
	errs := make(chan error, 4*5)
	for range 4 {
		pool, err := pgxpool.New(ctx, dsn) // pgx's defaults
		require.NoError(t, err)
		defer pool.Close()
		wg.Go(func() {
			for range 5 {
				if _, err := migrations.Migrate(ctx, pool); err != nil {
					errs <- err
					return
				}
				if err := migrations.Check(ctx, pool); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	v, err := migrations.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
	all, err := migrations.All()
	require.NoError(t, err)
	previous := all[len(all)-2].Version
	_, err = migrations.Rollback(ctx, pool, previous)
	require.NoError(t, err)
	v, err = migrations.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, previous, v)
}
