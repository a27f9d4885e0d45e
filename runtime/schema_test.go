package runtime_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// schemaWakes is claimReasons that also counts the wakes of one reason.
type schemaWakes struct {
	*claimReasons
	counted runtime.WakeReason
	woken   atomic.Int64 // of reason counted
	all     atomic.Int64 // of any reason
	jobs    atomic.Int64 // claimed
}

func (w *schemaWakes) Claimed(queue string, jobs []*runtime.Job, rescued int) {
	w.jobs.Add(int64(len(jobs)))
	w.claimReasons.Claimed(queue, jobs, rescued)
}

func (w *schemaWakes) Woken(queue string, reason runtime.WakeReason) {
	if reason == w.counted {
		w.woken.Add(1)
	}
	w.all.Add(1)
	w.claimReasons.Woken(queue, reason)
}

// schemaApp is one application of a shared database: its runtime, a pool
// whose search_path is its schema, and the jobs its handler ran.
type schemaApp struct {
	schema string
	mode   runtime.Mode
	pool   *pgxpool.Pool
	obs    *schemaWakes
	ran    chan int64
}

func startSchemaApp(t *testing.T, db *testdb.DB, schema string, mode runtime.Mode, reason runtime.WakeReason) *schemaApp {
	t.Helper()
	ctx := context.Background()
	_, err := migrations.MigrateIn(ctx, db.Pool, schema, migrations.Latest())
	require.NoError(t, err)
	dsn := schemaDSN(t, db)
	pc, err := pgconfig.Pool(dsn)
	require.NoError(t, err)
	require.NoError(t, runtime.UseSchema(pc, schema))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	app := &schemaApp{schema: schema, mode: mode, pool: pool, obs: &schemaWakes{claimReasons: newClaimReasons(), counted: reason}, ran: make(chan int64, 10)}
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(_ context.Context, j *runtime.Job) error { app.ran <- j.ID; return nil }})
	cfg.DSN, cfg.Schema, cfg.Mode, cfg.Observer = dsn, schema, mode, app.obs
	start(t, cfg)
	return app
}

// schemaDSN is db's main DSN, unless it leads through a PgBouncer that
// refuses the search_path startup parameter (before 1.20): then the direct
// one. TestSchemaThroughPgBouncer checks what PgBouncer does with it.
func schemaDSN(t *testing.T, db *testdb.DB) string {
	t.Helper()
	if !testdb.ThroughPgBouncer() {
		return db.DSN
	}
	cfg, err := pgconfig.Conn(db.DSN)
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = "public"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if pgconfig.SearchPathRefused(err) {
		t.Logf("PgBouncer refuses search_path (before 1.20): the schema's connections go to PostgreSQL directly")
		return db.DirectDSN
	}
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))
	return db.DSN
}

// asleep waits until the app's producer has claimed and found nothing, and
// in ModeNotify recorded its sleep, after which an insert notifies it
// (migration 0005); it returns the wakes so far.
func (a *schemaApp) asleep(t *testing.T) int64 {
	t.Helper()
	waitFor(t, 20*time.Second, a.schema+"'s producer asleep", func() bool {
		if a.mode == runtime.ModeWAL {
			// The stream wakes every queue when it connects, and each
			// empty claim of a WAL wake is rechecked twice: quiet is no
			// wake for three times the longest recheck delay (100 ms).
			before := a.obs.all.Load()
			time.Sleep(300 * time.Millisecond)
			return a.obs.all.Load() == before
		}
		var asleep bool
		require.NoError(t, a.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM fila_sleepers WHERE queue = 'default')").Scan(&asleep))
		return asleep && a.obs.claimsOf("default") >= 2
	})
	return a.obs.woken.Load()
}

// runsOnlyHere inserts a job into a's schema and requires a's runtime to
// run it, woken by reason (the safety poll is 10 minutes). In ModeWAL the
// claim may be a recheck of the wake, which counts as a poll: the wake
// counts show that it came.
func (a *schemaApp) runsOnlyHere(t *testing.T, reason runtime.WakeReason) {
	t.Helper()
	id, err := runtime.Insert(context.Background(), a.pool, "k", nil, nil)
	require.NoError(t, err)
	select {
	case got := <-a.ran:
		require.Equal(t, id, got)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s's job %d did not run within 20s (safety poll 10 minutes)", a.schema, id)
	}
	got, queue := a.obs.reason(id)
	require.Equal(t, "default", queue)
	if a.mode != runtime.ModeWAL {
		require.Equal(t, reason, got, "%s's job was claimed on its own schema's wake, not a poll", a.schema)
	}
}

// testTwoSchemas runs two applications in two schemas of one database, the
// job of each inserted while both sleep (ids of two schemas are alike: each
// has its own sequence): each runs only its own job, woken
// by its own schema's wake, and the other schema's insert woke nothing.
func testTwoSchemas(t *testing.T, mode runtime.Mode, reason runtime.WakeReason) {
	db := testdbNew(t)
	ctx := context.Background()
	// public has Fila's tables too, and a job nobody works here.
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	publicJob, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)

	a := startSchemaApp(t, db, "app_a", mode, reason)
	b := startSchemaApp(t, db, "app_b", mode, reason)
	aWakes, bWakes := a.asleep(t), b.asleep(t)

	a.runsOnlyHere(t, reason)
	// b's wake source would have delivered a's wake before b's own.
	b.runsOnlyHere(t, reason)
	require.Equal(t, aWakes+1, a.obs.woken.Load(), "app_a woken once, by its own job")
	require.Equal(t, bWakes+1, b.obs.woken.Load(), "app_b woken once, by its own job: app_a's insert did not wake it")
	require.EqualValues(t, 1, a.obs.jobs.Load(), "app_a claimed its own job only")
	require.EqualValues(t, 1, b.obs.jobs.Load(), "app_b claimed its own job only")
	select {
	case id := <-a.ran:
		t.Fatalf("app_a ran job %d as well", id)
	case id := <-b.ran:
		t.Fatalf("app_b ran job %d as well", id)
	default:
	}

	// Each schema's rows are its own: its worker's registry row, its job.
	for _, app := range []*schemaApp{a, b} {
		var workers int
		require.NoError(t, app.pool.QueryRow(ctx, "SELECT count(*) FROM fila_workers").Scan(&workers))
		require.Equal(t, 1, workers, "%s has one worker", app.schema)
		waitFor(t, 10*time.Second, app.schema+"'s job completed", func() bool {
			var completed int
			require.NoError(t, app.pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&completed))
			return completed == 1
		})
	}
	state, _, _ := jobState(t, db, publicJob)
	require.Equal(t, "pending", state, "public's job was left alone")
	var publicWorkers int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM public.fila_workers").Scan(&publicWorkers))
	require.Zero(t, publicWorkers)
}

func TestSchemasNotify(t *testing.T) {
	t.Parallel()
	testTwoSchemas(t, runtime.ModeNotify, runtime.WakeNotify)
}

func TestSchemasWAL(t *testing.T) {
	t.Parallel()
	walLevelLogical(t)
	testTwoSchemas(t, runtime.ModeWAL, runtime.WakeWAL)
}

// TestSchemaConfig refuses a schema name Fila cannot use, naming the
// problem, and a Pool that finds another schema's tables.
func TestSchemaConfig(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"app-a":   `Schema: schema name "app-a" may contain only`,
		"pg_jobs": "reserves",
	} {
		cfg := runtime.Config{DSN: "postgres://localhost/x", Schema: name, Kinds: []runtime.Kind{{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}}}
		_, err := runtime.New(cfg)
		require.ErrorContains(t, err, want)
	}

	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.DSN, cfg.Schema = schemaDSN(t, db), "app_a"
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	require.ErrorContains(t, rt.Run(ctx), "schema app_a: database is not migrated: it is at version 0")

	_, err = migrations.MigrateIn(ctx, db.Pool, "app_a", migrations.Latest())
	require.NoError(t, err)
	pc, err := pgconfig.Pool(schemaDSN(t, db))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg = baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.DSN, cfg.Pool, cfg.Schema = "", pool, "app_a"
	rt, err = runtime.New(cfg)
	require.NoError(t, err)
	err = rt.Run(ctx)
	require.ErrorContains(t, err, "Config.Pool finds fila_jobs in schema public, not in Config.Schema app_a")
}

// TestSchemaThroughPgBouncer runs two schemas' connections through one
// server connection of a transaction-mode PgBouncer. Where PgBouncer tracks
// search_path (1.20 and later, track_extra_parameters), every transaction of
// each client finds its own schema, whichever client's path the server
// connection had before; where it cannot, the connection is refused and
// the runtime says why. The parameter is never dropped silently.
func TestSchemaThroughPgBouncer(t *testing.T) {
	t.Parallel()
	db := testdbNew(t)
	ctx := context.Background()
	for _, s := range []string{"app_a", "app_b"} {
		_, err := migrations.MigrateIn(ctx, db.Pool, s, migrations.Latest())
		require.NoError(t, err)
	}
	u, err := url.Parse(db.DirectDSN)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(bctx, pgbouncer.Options{UpstreamHost: u.Hostname(), UpstreamPort: port, PoolSize: 1, Logger: zaptest.NewLogger(t)})
	if errors.Is(err, pgbouncer.ErrNotInstalled) {
		testdb.Missing(t, "%v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	dsn := b.DSN(db.Name)

	if !b.TracksExtraParameters() {
		cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
		cfg.DSN, cfg.Schema = dsn, "app_a"
		rt, err := runtime.New(cfg)
		require.NoError(t, err)
		err = rt.Run(ctx)
		require.ErrorContains(t, err, "cannot reach the database with Schema app_a: the pooler refuses the search_path startup parameter")
		require.ErrorContains(t, err, "track_extra_parameters = search_path")
		t.Logf("PgBouncer before 1.20 refuses the search_path a schema sets, as the runtime reports: %v", err)
		return
	}
	pools := map[string]*pgxpool.Pool{}
	for _, s := range []string{"app_a", "app_b"} {
		pc, err := pgconfig.Pool(dsn)
		require.NoError(t, err)
		require.NoError(t, runtime.UseSchema(pc, s))
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		pools[s], err = pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		t.Cleanup(pools[s].Close)
	}
	// One server connection (PoolSize 1), the clients' transactions taking
	// turns on it.
	for range 20 {
		for s, p := range pools {
			var found string
			require.NoError(t, p.QueryRow(ctx, sqlJobsSchemaForTest).Scan(&found))
			require.Equal(t, s, found, "a transaction of %s's client through PgBouncer", s)
		}
	}
}

// sqlJobsSchemaForTest is the schema of the fila_jobs a session finds.
const sqlJobsSchemaForTest = `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('fila_jobs')`
