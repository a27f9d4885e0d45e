package migrations_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// schemaSQL describes everything the migrations create in the schema, one
// sorted line per object: tables, columns with their types, defaults and
// nullability, constraints, indexes, functions with their settings,
// triggers with their enabled state, and sequences.
const schemaSQL = `
SELECT line FROM (
  SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') AS line
    FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
  UNION ALL
  SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
         || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
         || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
     AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
   WHERE c.relnamespace = current_schema()::regnamespace
  UNION ALL
  SELECT 'function ' || pg_get_functiondef(p.oid)
    FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' enabled ' || t.tgenabled::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
   WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
) x ORDER BY line`

func schema(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), schemaSQL)
	require.NoError(t, err)
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return objects
}

// requireSameSchema fails naming the objects one schema has and the other
// lacks, each by its first line.
func requireSameSchema(t *testing.T, want, got []string, what string, args ...any) {
	t.Helper()
	var missing, extra []string
	for _, o := range want {
		if !slices.Contains(got, o) {
			missing = append(missing, firstLine(o))
		}
	}
	for _, o := range got {
		if !slices.Contains(want, o) {
			extra = append(extra, firstLine(o))
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Fatalf("%s: missing or different:\n  %s\nextra or different:\n  %s", fmt.Sprintf(what, args...),
			strings.Join(missing, "\n  "), strings.Join(extra, "\n  "))
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestRollbackRestoresEachVersion migrates up one version at a time, noting
// the schema at each, then rolls back one version at a time: every down
// script must give back exactly the schema its version had. Then up again
// to the latest, which must match the first way up.
func TestRollbackRestoresEachVersion(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	latest := migrations.Latest()
	// The versions in order, from 0 (no tables); numbers may be skipped
	// (one kept for a migration of another branch).
	all, err := migrations.All()
	require.NoError(t, err)
	versions := []int{0}
	for _, m := range all {
		versions = append(versions, m.Version)
	}
	at := map[int][]string{}
	for i, v := range versions {
		applied, err := migrations.MigrateTo(ctx, db.Pool, v)
		require.NoError(t, err)
		if i > 0 {
			require.Equal(t, []int{v}, applied)
		}
		at[v] = schema(t, db)
		if i > 0 {
			require.NotEqual(t, at[versions[i-1]], at[v], "migration %d changes the schema", v)
		}
	}
	// A job inserted at the latest version outlives every rollback but the
	// last, which drops its table.
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('kept', '{"n": 1}') RETURNING id`).Scan(&id))
	for i := len(versions) - 2; i >= 0; i-- {
		v, above := versions[i], versions[i+1]
		undone, err := migrations.Rollback(ctx, db.Pool, v)
		require.NoError(t, err)
		require.Equal(t, []int{above}, undone)
		got, err := migrations.Version(ctx, db.Pool)
		require.NoError(t, err)
		require.Equal(t, v, got)
		requireSameSchema(t, at[v], schema(t, db), "rolling back migration %d to version %d", above, v)
		if v > 0 {
			var kind, payload string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT kind, payload::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&kind, &payload),
				"the job outlives rolling back to version %d", v)
			require.Equal(t, "kept", kind)
			require.JSONEq(t, `{"n": 1}`, payload)
		}
	}
	applied, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, applied, len(all))
	requireSameSchema(t, at[latest], schema(t, db), "up again after a full rollback")
}

func TestRollbackRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	latest := migrations.Latest()

	_, err = migrations.Rollback(ctx, db.Pool, -1)
	require.ErrorContains(t, err, "migration version -1 does not exist")
	_, err = migrations.MigrateTo(ctx, db.Pool, latest+1)
	require.ErrorContains(t, err, "does not exist")

	undone, err := migrations.Rollback(ctx, db.Pool, latest)
	require.NoError(t, err)
	require.Empty(t, undone, "already there")

	// A database migrated by a newer build: this one has not its down scripts.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_migrations (version, name) VALUES ($1::int, 'from_the_future')`, latest+1)
	require.NoError(t, err)
	_, err = migrations.Rollback(ctx, db.Pool, latest-1)
	require.ErrorContains(t, err, "newer than this build's")
	v, err := migrations.Version(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, latest+1, v, "nothing was undone")
}
