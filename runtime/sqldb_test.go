package runtime_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq" // the "postgres" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// sqlDrivers are the database/sql drivers runtime.SQL is tested on: pgx's
// (github.com/jackc/pgx/v5/stdlib) and lib/pq's.
var sqlDrivers = []string{"pgx", "postgres"}

// openSQL opens a *sql.DB on db with driver, closed when the test ends.
func openSQL(t testing.TB, driver string, db *testdb.DB) *sql.DB {
	t.Helper()
	var s *sql.DB
	switch driver {
	case "pgx":
		cfg, err := pgconfig.Conn(db.DSN)
		require.NoError(t, err)
		s = stdlib.OpenDB(*cfg)
	default:
		// lib/pq asks for TLS unless told not to, and the shared PgBouncer
		// has none: the DSN says what pgx's parser defaults to.
		dsn := db.DSN
		add := func(param string) {
			dsn += map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + param
		}
		if !strings.Contains(dsn, "sslmode=") {
			add("sslmode=disable")
		}
		if testdb.ThroughPgBouncer() {
			// lib/pq prepares an unnamed statement in one round trip and
			// binds it in the next, which a transaction-mode PgBouncer may
			// send to another server connection; with binary_parameters it
			// sends both at once (docs/go-api.md says so).
			add("binary_parameters=yes")
		}
		var err error
		s, err = sql.Open(driver, dsn)
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.PingContext(context.Background()))
	return s
}

// invoice is a typed job inserted through database/sql.
type invoice struct {
	Customer string   `json:"customer"`
	Lines    []string `json:"lines"`
}

func (invoice) Kind() string { return "invoice" }

func (invoice) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "billing", MaxAttempts: 4}
}

// A job enqueued in the caller's database/sql transaction exists only if it
// commits, with every option as given, and a real runtime claims and runs
// it: the row is as workable as one written through pgx.
func TestSQLInsertTxCommitsOrRollsBack(t *testing.T) {
	t.Parallel()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDB(t)
			sdb := openSQL(t, driver, db)
			client := runtime.NewClient(runtime.SQL(sdb))
			runAt := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
			opts := &runtime.InsertOpts{Priority: 7, RunAt: runAt, UniqueKey: "invoice-42", Tags: []string{"eu", "monthly"},
				Metadata: map[string]any{"source": "checkout", "n": 3}}
			args := invoice{Customer: "ana", Lines: []string{"tea", "cake"}}

			tx, err := sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			gone, err := client.InsertTx(ctx, runtime.SQL(tx), args, opts)
			require.NoError(t, err)
			require.Positive(t, gone.ID)
			require.NoError(t, tx.Rollback())
			_, err = runtime.GetJob(ctx, db.Pool, gone.ID)
			require.ErrorIs(t, err, runtime.ErrJobNotFound, "a job of a rolled-back transaction")

			tx, err = sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			res, err := client.InsertTx(ctx, runtime.SQL(tx), args, opts)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			dup, err := client.InsertTx(ctx, runtime.SQL(tx), args, opts)
			require.NoError(t, err)
			require.Equal(t, runtime.Inserted{ID: res.ID, Duplicate: true, DuplicateState: runtime.StatePending}, dup)
			_, err = runtime.GetJob(ctx, db.Pool, res.ID)
			require.ErrorIs(t, err, runtime.ErrJobNotFound, "not visible before the commit")
			require.NoError(t, tx.Commit())

			job, err := runtime.GetJob(ctx, db.Pool, res.ID)
			require.NoError(t, err)
			require.Equal(t, "invoice", job.Kind)
			require.Equal(t, "billing", job.Queue)
			require.Equal(t, int16(7), job.Priority)
			require.Equal(t, 4, job.MaxAttempts)
			require.True(t, runAt.Equal(job.RunAt), "run_at %s, given %s", job.RunAt, runAt)
			require.Equal(t, []string{"eu", "monthly"}, job.Tags)
			require.JSONEq(t, `{"customer": "ana", "lines": ["tea", "cake"]}`, string(job.Payload))
			require.JSONEq(t, `{"source": "checkout", "n": 3}`, string(job.Metadata))
			var key string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT unique_key FROM fila_jobs WHERE id = $1`, res.ID).Scan(&key))
			require.Equal(t, "invoice-42", key)

			got := make(chan invoice, 1)
			cfg := baseConfig(t, db, runtime.Work(func(ctx context.Context, j *runtime.Job, a invoice) error {
				if j.ID == res.ID && strings.Contains(string(j.Metadata), `"checkout"`) {
					got <- a
				}
				return nil
			}))
			cfg.Queues = []string{"billing"}
			start(t, cfg)
			select {
			case a := <-got:
				require.Equal(t, args, a)
			case <-time.After(30 * time.Second):
				t.Fatal("the job inserted through database/sql was not run")
			}
			waitFor(t, 10*time.Second, "the job completed", func() bool {
				state, _, _ := jobState(t, db, res.ID)
				return state == runtime.StateCompleted
			})
		})
	}
}

// A handle SQL cannot use is named in the error: nil, a nil *sql.Tx, a
// transaction already committed.
func TestSQLBadHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	sdb := openSQL(t, "pgx", db)
	var nilTx *sql.Tx
	_, err := runtime.Insert(ctx, runtime.SQL(nilTx), "invoice", nil, nil)
	require.ErrorContains(t, err, "runtime.SQL: the *sql.Tx given is nil")
	_, err = runtime.ListJobs(ctx, runtime.SQL(nil), runtime.JobFilter{})
	require.ErrorContains(t, err, "runtime.SQL: no database/sql handle given (nil)")
	_, _, err = runtime.InsertBatch(ctx, runtime.SQL(nilTx), nil, runtime.BatchCallback{Kind: "done"})
	require.ErrorContains(t, err, "runtime.SQL: the *sql.Tx given is nil")

	tx, err := sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	_, err = runtime.Insert(ctx, runtime.SQL(tx), "invoice", nil, nil)
	require.ErrorIs(t, err, sql.ErrTxDone)
	require.ErrorContains(t, err, "transaction has already been committed or rolled back")
	_, err = runtime.InsertMany(ctx, runtime.SQL(tx), []runtime.InsertParams{{Kind: "a", InsertOpts: runtime.InsertOpts{UniqueKey: "k"}}})
	require.ErrorIs(t, err, sql.ErrTxDone)
	require.Zero(t, countState(t, db, runtime.StatePending))
}

// InsertMany through database/sql: a batch above InsertManyCopyMin is
// written in one statement (database/sql has no COPY), in order, with
// what each job sets; a batch with unique keys is all or nothing, in a
// transaction of its own on a *sql.DB and in a savepoint of the caller's
// *sql.Tx, which stays usable after it failed. The table's refusal reads as
// ErrPayloadLimit on either driver.
func TestSQLInsertMany(t *testing.T) {
	t.Parallel()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDB(t)
			sdb := openSQL(t, driver, db)
			n := runtime.InsertManyCopyMin + 10
			later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
			jobs := make([]runtime.InsertParams, n)
			for i := range jobs {
				jobs[i] = runtime.InsertParams{Kind: "many", Payload: map[string]int{"i": i}}
				if i%3 == 0 {
					jobs[i].RunAt = later
					jobs[i].Tags = []string{"third"}
					jobs[i].Metadata = map[string]any{"i": i}
				}
			}
			tx, err := sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			ids, err := runtime.InsertMany(ctx, runtime.SQL(tx), jobs)
			require.NoError(t, err)
			require.Len(t, ids, n)
			require.NoError(t, tx.Commit())
			for i := 1; i < n; i++ {
				require.Greater(t, ids[i], ids[i-1], "ids in the order of the jobs")
			}
			for _, i := range []int{0, 1, n - 1} {
				j, err := runtime.GetJob(ctx, db.Pool, ids[i])
				require.NoError(t, err)
				require.JSONEq(t, `{"i": `+strconv.Itoa(i)+`}`, string(j.Payload))
				if i%3 == 0 {
					require.True(t, later.Equal(j.RunAt))
					require.Equal(t, []string{"third"}, j.Tags)
					require.JSONEq(t, `{"i": `+strconv.Itoa(i)+`}`, string(j.Metadata))
				} else {
					require.Nil(t, j.Tags)
					require.Nil(t, j.Metadata)
				}
			}

			// The table refuses the second job of a unique batch: nothing of
			// it is written.
			require.NoError(t, runtime.SetTablePayloadLimits(ctx, runtime.SQL(sdb), runtime.PayloadLimits{MaxBytes: 1024}))
			limits, ok, err := runtime.TablePayloadLimits(ctx, runtime.SQL(sdb))
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, 1024, limits.MaxBytes)
			unique := []runtime.InsertParams{
				{Kind: "u", InsertOpts: runtime.InsertOpts{UniqueKey: "first"}},
				{Kind: "u", Payload: map[string]string{"text": strings.Repeat("x", 2000)},
					InsertOpts: runtime.InsertOpts{UniqueKey: "second", PayloadLimits: runtime.PayloadLimits{MaxBytes: 1 << 20}}},
			}
			_, err = runtime.InsertMany(ctx, runtime.SQL(sdb), unique)
			require.ErrorIs(t, err, runtime.ErrPayloadLimit)
			requireNoKind(t, db, "u")

			tx, err = sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = runtime.InsertMany(ctx, runtime.SQL(tx), unique)
			require.ErrorIs(t, err, runtime.ErrPayloadLimit)
			ids, err = runtime.InsertMany(ctx, runtime.SQL(tx), unique[:1])
			require.NoError(t, err, "the caller's transaction is usable after the failed batch")
			require.NoError(t, tx.Commit())
			j, err := runtime.GetJob(ctx, db.Pool, ids[0])
			require.NoError(t, err)
			require.Equal(t, "u", j.Kind)
			var count int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE kind = 'u'`).Scan(&count))
			require.Equal(t, 1, count)
		})
	}
}

func requireNoKind(t *testing.T, db *testdb.DB, kind string) {
	t.Helper()
	var count int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM fila_jobs WHERE kind = $1`, kind).Scan(&count))
	require.Zero(t, count, "jobs of kind %s", kind)
}

// A handler completes its job in its own database/sql transaction: the
// completion reads the rows it updated, so a second one in the same
// transaction finds the attempt no longer the worker's.
func TestSQLCompleteTx(t *testing.T) {
	t.Parallel()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDB(t)
			sdb := openSQL(t, driver, db)
			_, err := sdb.ExecContext(ctx, `CREATE TABLE sent (job bigint PRIMARY KEY)`)
			require.NoError(t, err)
			second := make(chan error, 1)
			cfg := baseConfig(t, db, runtime.Kind{Name: "mail", Handler: func(ctx context.Context, j *runtime.Job) error {
				tx, err := sdb.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.ExecContext(ctx, `INSERT INTO sent VALUES ($1)`, j.ID); err != nil {
					return err
				}
				j.SetOutput(map[string]bool{"sent": true})
				if err := runtime.CompleteTx(ctx, runtime.SQL(tx), j); err != nil {
					return err
				}
				select { // a later attempt, if any, does not wait for the test
				case second <- runtime.CompleteTx(ctx, runtime.SQL(tx), j):
				default:
				}
				return tx.Commit()
			}})
			start(t, cfg)
			id, err := runtime.Insert(ctx, runtime.SQL(sdb), "mail", nil, nil)
			require.NoError(t, err)
			select {
			case err := <-second:
				require.ErrorIs(t, err, runtime.ErrNotOwner)
			case <-time.After(30 * time.Second):
				t.Fatal("the handler did not run")
			}
			waitFor(t, 10*time.Second, "the job completed in the handler's transaction", func() bool {
				state, _, _ := jobState(t, db, id)
				return state == runtime.StateCompleted
			})
			j, err := runtime.GetJob(ctx, db.Pool, id)
			require.NoError(t, err)
			require.JSONEq(t, `{"sent": true}`, string(j.Output))
			var sent int64
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT job FROM sent`).Scan(&sent))
			require.Equal(t, id, sent)
		})
	}
}

// txOnly has a *sql.Tx's three methods and nothing else, as a framework's
// own handle may: SQL runs Fila's statements on it one by one.
type txOnly struct{ tx *sql.Tx }

func (q txOnly) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.tx.ExecContext(ctx, query, args...)
}

func (q txOnly) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.tx.QueryContext(ctx, query, args...)
}

func (q txOnly) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

// A *sql.Conn gets a transaction of Fila's own where a pool does; any
// other handle gets the statements one by one, and what needs a
// transaction of its own says so.
func TestSQLConnAndOtherHandles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	sdb := openSQL(t, "postgres", db)
	unique := []runtime.InsertParams{{Kind: "u", InsertOpts: runtime.InsertOpts{UniqueKey: "a"}},
		{Kind: "u", InsertOpts: runtime.InsertOpts{UniqueKey: "b"}}}

	conn, err := sdb.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ids, err := runtime.InsertMany(ctx, runtime.SQL(conn), unique)
	require.NoError(t, err)
	require.Len(t, ids, 2)
	batch, _, err := runtime.InsertBatch(ctx, runtime.SQL(conn), []runtime.InsertParams{{Kind: "part"}}, runtime.BatchCallback{Kind: "done"})
	require.NoError(t, err)
	b, err := runtime.GetBatch(ctx, db.Pool, batch)
	require.NoError(t, err)
	require.True(t, b.Sealed)

	tx, err := sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	q := runtime.SQL(txOnly{tx})
	again, err := runtime.InsertMany(ctx, q, unique)
	require.NoError(t, err)
	require.Equal(t, ids, again, "the duplicates' ids are the existing jobs'")
	err = runtime.SetTablePayloadLimits(ctx, q, runtime.PayloadLimits{})
	require.ErrorContains(t, err, "needs a pool, a connection or a transaction")
	require.NoError(t, tx.Commit())
}
