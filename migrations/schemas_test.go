package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// schemaIn is schema for the objects of the named schema: its search_path
// alone, and the schema's name taken out of the definitions that always
// qualify it (indexes, triggers), so each reads as in any other schema.
func schemaIn(t *testing.T, db *testdb.DB, name string) []string {
	t.Helper()
	ctx := context.Background()
	var objects []string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
		// current_schema()::regnamespace would read App_B as app_b.
		rows, err := tx.Query(ctx, strings.ReplaceAll(schemaSQL, "current_schema()::regnamespace",
			"(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"))
		if err != nil {
			return err
		}
		objects, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	for i, o := range objects {
		objects[i] = strings.ReplaceAll(o, " "+pgx.Identifier{name}.Sanitize()+".", " ")
		objects[i] = strings.ReplaceAll(objects[i], " "+name+".", " ")
	}
	return objects
}

// TestMigrateInSchemas migrates Fila into public and two named schemas of
// one database: each gets the same objects, and migrating or rolling back
// one leaves the others as they were.
func TestMigrateInSchemas(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	latest := migrations.Latest()

	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	public := schemaIn(t, db, "public")
	require.NotEmpty(t, public)
	for _, s := range []string{"app_a", "App_B"} {
		applied, err := migrations.MigrateIn(ctx, db.Pool, s, latest)
		require.NoError(t, err)
		require.Len(t, applied, len(mustAll(t)), "schema %s starts from nothing", s)
		requireSameSchema(t, public, schemaIn(t, db, s), "schema %s against public", s)
		applied, err = migrations.MigrateIn(ctx, db.Pool, s, latest)
		require.NoError(t, err)
		require.Empty(t, applied, "a second run in %s changes nothing", s)
	}

	// Down and up again in app_a, one version and then all of them.
	undone, err := migrations.RollbackIn(ctx, db.Pool, "app_a", latest-1)
	require.NoError(t, err)
	require.Equal(t, []int{latest}, undone)
	requireSameSchema(t, public, schemaIn(t, db, "public"), "public after app_a's rollback")
	requireSameSchema(t, public, schemaIn(t, db, "App_B"), "App_B after app_a's rollback")
	_, err = migrations.RollbackIn(ctx, db.Pool, "app_a", 0)
	require.NoError(t, err)
	for _, o := range schemaIn(t, db, "app_a") {
		require.Contains(t, o, "fila_migrations", "rolled back to 0, app_a holds only the table of versions")
	}
	var kept bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'app_a')").Scan(&kept))
	require.True(t, kept, "the schema itself stays")
	requireSameSchema(t, public, schemaIn(t, db, "public"), "public after app_a's rollback to 0")
	requireSameSchema(t, public, schemaIn(t, db, "App_B"), "App_B after app_a's rollback to 0")
	v, err := migrations.Version(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, latest, v, "public's version")
	_, err = migrations.MigrateIn(ctx, db.Pool, "app_a", latest)
	require.NoError(t, err)
	requireSameSchema(t, public, schemaIn(t, db, "app_a"), "app_a migrated again")

	// "public" is the default schema, under its old lock.
	applied, err := migrations.MigrateIn(ctx, db.Pool, "public", latest)
	require.NoError(t, err)
	require.Empty(t, applied)
}

// TestMigrateLockPerSchema holds the migration lock of one schema, as a
// long migration of it would: another schema migrates meanwhile, and the
// held schema's migration waits.
func TestMigrateLockPerSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::int, hashtext('app_a'))", migrations.LockMigrateSchema)
	require.NoError(t, err)

	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = migrations.MigrateIn(bctx, db.Pool, "app_b", migrations.Latest())
	require.NoError(t, err, "app_b migrates while app_a's lock is held")
	_, err = migrations.Migrate(bctx, db.Pool)
	require.NoError(t, err, "so does public")

	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = migrations.MigrateIn(actx, db.Pool, "app_a", migrations.Latest())
	require.Error(t, err, "app_a's migration waits for its lock")
	require.NoError(t, tx.Rollback(ctx))
	_, err = migrations.MigrateIn(ctx, db.Pool, "app_a", migrations.Latest())
	require.NoError(t, err)
}

// TestMigrateInvalidSchema refuses a schema name Fila cannot use, naming
// the problem, before connecting to anything.
func TestMigrateInvalidSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, want := range map[string]string{
		"app-a":   `schema name "app-a" may contain only`,
		"pg_fila": "reserves",
		"9lives":  "may not start with a digit",
	} {
		_, err := migrations.MigrateIn(ctx, nil, name, migrations.Latest())
		require.ErrorContains(t, err, want)
		_, err = migrations.RollbackIn(ctx, nil, name, 0)
		require.ErrorContains(t, err, want)
	}
	db := testdb.New(t)
	_, err := migrations.RollbackIn(ctx, db.Pool, "nowhere", 0)
	require.ErrorContains(t, err, "schema nowhere does not exist")
}

func mustAll(t *testing.T) []migrations.Migration {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	return all
}
