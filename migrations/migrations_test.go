package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	require.ErrorIs(t, migrations.Check(ctx, db.Pool), migrations.ErrNotMigrated)
	require.ErrorContains(t, migrations.Check(ctx, db.Pool), "fila migrate")

	var wg sync.WaitGroup
	results := make([][]int, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrations.Migrate(ctx, db.Pool)
		}()
	}
	wg.Wait()
	applied := 0
	for i := range results {
		require.NoError(t, errs[i])
		applied += len(results[i])
	}
	all, err := migrations.All()
	require.NoError(t, err)
	require.Equal(t, len(all), applied, "each migration applied exactly once across concurrent runs")
	again, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, again)
	require.NoError(t, migrations.Check(ctx, db.Pool))
	v, err := migrations.Version(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
}

func TestSchemaContract(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	// The columns other languages and operators rely on.
	rows, err := db.Pool.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_name = 'fila_jobs' ORDER BY ordinal_position`)
	require.NoError(t, err)
	var cols []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	for _, c := range []string{"id", "queue", "kind", "payload", "priority", "state", "run_at", "attempts",
		"max_attempts", "lease_until", "last_error", "created_at", "started_at", "finished_at"} {
		require.Contains(t, cols, c)
	}
	// A plain INSERT with only kind gets every default.
	var queue, state, payload string
	var attempts, maxAttempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind) VALUES ('k')
		RETURNING queue, state, payload::text, attempts, max_attempts`).Scan(&queue, &state, &payload, &attempts, &maxAttempts))
	require.Equal(t, "default", queue)
	require.Equal(t, "pending", state)
	require.Equal(t, "{}", payload)
	require.Zero(t, attempts)
	require.Equal(t, 5, maxAttempts)
	// The claim uses the partial index on pending rows.
	require.Contains(t, explain(t, db), "fila_jobs_pending_idx")
	// Autovacuum is tuned for churn.
	var opts []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE relname = 'fila_jobs'`).Scan(&opts))
	require.Contains(t, opts, "autovacuum_vacuum_scale_factor=0.01")
	// Bad rows are refused by the table itself, naming the constraint.
	for _, bad := range []string{"no spaces allowed", "", strings.Repeat("q", 59), "fila_ção", "new\nline"} {
		_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, queue) VALUES ('k', $1::text)`, bad)
		require.ErrorContains(t, err, "fila_jobs_queue_valid", "%q", bad)
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, queue) VALUES ('k', $1::text), ('k', 'A-z_0.9')`, strings.Repeat("q", 58))
	require.NoError(t, err, "58 characters of the allowed set")
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) VALUES ('')`)
	require.ErrorContains(t, err, "fila_jobs_kind_valid")
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('k', '{oops')`)
	require.ErrorContains(t, err, "json")
	// The hot path's functions never JIT-compile their statements, and the
	// claim plans its own once, however large the table's estimates grow
	// (migration 0006); the outcome functions plan once too, reaching every
	// row through its primary key (0008), and no plan of theirs or of the
	// claim scans the table or hashes a join (0008, 0010).
	for fn, want := range map[string][]string{
		"fila_claim":     {"jit=off", "plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"},
		"fila_claim_id":  {"jit=off", "plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"},
		"fila_finish":    {"jit=off", "plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"},
		"fila_heartbeat": {"jit=off", "plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"},
		"fila_release":   {"jit=off", "plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_hashjoin=off", "enable_mergejoin=off"},
		"fila_sleep":     {"jit=off"},
	} {
		var config []string
		// The current signature: the one with the most arguments (an older
		// one may stay as a wrapper for workers of the previous build).
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = $1
			ORDER BY pronargs DESC LIMIT 1`, fn).Scan(&config))
		require.ElementsMatch(t, want, config, fn)
	}
}

func explain(t *testing.T, db *testdb.DB) string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET enable_seqscan = off")
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN SELECT id FROM fila_jobs WHERE state = 'pending' AND queue = 'default'
		AND run_at <= now() ORDER BY priority, run_at, id LIMIT 10`)
	require.NoError(t, err)
	defer rows.Close()
	var plan string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan += line + "\n"
	}
	require.NoError(t, rows.Err())
	_, _ = conn.Exec(ctx, "RESET enable_seqscan")
	return plan
}
