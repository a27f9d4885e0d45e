package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
)

// schemaDB is db with its main DSN direct when it leads through a
// PgBouncer that refuses the search_path startup parameter (before 1.20);
// runtime's TestSchemaThroughPgBouncer checks what PgBouncer does with it.
func schemaDB(t *testing.T, db *testdb.DB) *testdb.DB {
	t.Helper()
	if !testdb.ThroughPgBouncer() {
		return db
	}
	cfg, err := pgconfig.Conn(db.DSN)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = "public"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if pgconfig.SearchPathRefused(err) {
		t.Logf("PgBouncer refuses search_path (before 1.20): fila --schema goes to PostgreSQL directly")
		direct := *db
		direct.DSN = db.DirectDSN
		return &direct
	}
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))
	return db
}

// TestSchemaCommands migrates two schemas of one database with fila
// migrate --schema, and runs a worker of each with fila work --schema: a
// job enqueued in app_a runs on app_a's worker, woken by its notification
// (the safety poll is 10 minutes), and app_b's worker runs nothing.
func TestSchemaCommands(t *testing.T) {
	t.Parallel()
	db := schemaDB(t, testdb.New(t))
	ctx := context.Background()

	for _, c := range []struct{ args, want string }{
		{"migrate --schema bad-name", `flag -schema: schema name "bad-name" may contain only ASCII letters, digits and '_'`},
		{"migrate --schema=", "flag -schema: schema name is empty"},
		{"work --schema pg_jobs", `flag -schema: schema name "pg_jobs" starts with pg_`},
		{"jobs list --schema app_a", "schema app_a has no Fila tables: run `fila migrate --schema app_a` first"},
	} {
		_, stderr, code := fila(t, db, strings.Fields(c.args)...)
		require.NotZero(t, code, c.args)
		require.Contains(t, stderr, c.want, c.args)
	}

	for _, s := range []string{"app_a", "app_b"} {
		out, stderr, code := fila(t, db, "migrate", "--schema", s)
		require.Zero(t, code, stderr)
		require.Contains(t, out, "now at version")
		out, stderr, code = fila(t, db, "migrate", "--schema", s)
		require.Zero(t, code, stderr)
		require.Contains(t, out, "nothing to do")
	}
	var public *string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regclass('public.fila_jobs')::text").Scan(&public))
	require.Nil(t, public, "public has no Fila tables")

	workers := map[string]*worker{}
	for _, s := range []string{"app_a", "app_b"} {
		workers[s] = startWorkerOutput(t, db, "--schema", s, "--safety-poll", "10m", "--exec", "k=echo ran in "+s)
	}
	asleep := func(s string) bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".fila_sleepers WHERE queue = 'default'").Scan(&n)
		return n == 1
	}
	waitFor(t, 60*time.Second, "both workers asleep", func() bool { return asleep("app_a") && asleep("app_b") })

	out, stderr, code := fila(t, db, "enqueue", "--schema", "app_a", "--kind", "k")
	require.Zero(t, code, stderr)
	require.NotEmpty(t, strings.TrimSpace(out))
	waitFor(t, 30*time.Second, "app_a's job completed (the safety poll is 10 minutes: only a notification explains it)", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM app_a.fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == 1
	})
	require.Contains(t, workers["app_a"].stdout.String(), "ran in app_a")
	var inB int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM app_b.fila_jobs").Scan(&inB))
	require.Zero(t, inB)
	require.NotContains(t, workers["app_b"].stdout.String(), "ran in")

	out, stderr, code = fila(t, db, "jobs", "list", "--schema", "app_a")
	require.Zero(t, code, stderr)
	require.Contains(t, out, "completed")
	out, stderr, code = fila(t, db, "jobs", "list", "--schema", "app_b")
	require.Zero(t, code, stderr)
	require.NotContains(t, out, "completed")
}
