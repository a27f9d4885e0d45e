package runtime_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// BenchmarkInsertThroughDatabaseSQL measures one typed InsertTx in the
// caller's transaction: through a pgx pool's pgx.Tx, and through
// runtime.SQL on a *sql.Tx of pgx's database/sql driver, each in pgx's
// exec mode (Fila's own, which PgBouncer 1.18 carries) and in its default
// mode, which caches statements; and of lib/pq's. The difference between
// the pool and pgx's driver in one mode is what database/sql and the
// adapter add to the round trip.
func BenchmarkInsertThroughDatabaseSQL(b *testing.B) {
	ctx := context.Background()
	db := newDB(b)
	args := invoice{Customer: "ana", Lines: []string{"tea"}}
	opts := &runtime.InsertOpts{Tags: []string{"eu"}, Metadata: map[string]any{"source": "checkout"}}
	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{{"exec", pgx.QueryExecModeExec}, {"cache-statement", pgx.QueryExecModeCacheStatement}}
	for _, m := range modes {
		b.Run("pgxpool/"+m.name, func(b *testing.B) {
			cfg, err := pgxpool.ParseConfig(db.DSN)
			require.NoError(b, err)
			cfg.ConnConfig.DefaultQueryExecMode = m.mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(b, err)
			defer pool.Close()
			client := runtime.NewClient(pool)
			tx, err := pool.Begin(ctx)
			require.NoError(b, err)
			defer func() { _ = tx.Rollback(ctx) }()
			for b.Loop() {
				if _, err := client.InsertTx(ctx, tx, args, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run := func(b *testing.B, sdb *sql.DB) {
		defer func() { _ = sdb.Close() }()
		client := runtime.NewClient(runtime.SQL(sdb))
		tx, err := sdb.BeginTx(ctx, nil)
		require.NoError(b, err)
		defer func() { _ = tx.Rollback() }()
		q := runtime.SQL(tx)
		for b.Loop() {
			if _, err := client.InsertTx(ctx, q, args, opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, m := range modes {
		b.Run("database-sql-pgx/"+m.name, func(b *testing.B) {
			cfg, err := pgx.ParseConfig(db.DSN)
			require.NoError(b, err)
			cfg.DefaultQueryExecMode = m.mode
			run(b, stdlib.OpenDB(*cfg))
		})
	}
	b.Run("database-sql-libpq", func(b *testing.B) {
		sdb, err := sql.Open("postgres", db.DSN)
		require.NoError(b, err)
		run(b, sdb)
	})
}
