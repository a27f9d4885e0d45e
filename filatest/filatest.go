// Package filatest helps you test your own code that uses Fila, against a
// real PostgreSQL:
//
//   - NewDB gives a test a migrated database of its own, dropped at its end;
//   - RequireInsertedTx asserts that your code enqueued a job of a type, in
//     the transaction the test gave it, and returns the job's args decoded
//     (RequireNotInsertedTx, the opposite; InsertedTx, every one;
//     RequireManyInsertedTx, a sequence of jobs of several kinds);
//   - Worker runs one job's handler synchronously inside the test's
//     transaction, as a worker would, and returns its outcome and the job's
//     row as the runtime left it;
//   - Subscribe and WaitForEvent let a test that runs a real runtime wait
//     for a job's (or a queue's) event instead of polling its row.
//
// NewDB connects to TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres) as a user that may create
// databases. It lives at the top of the module, beside runtime, because it
// ties runtime and migrations together for code outside both, as River's
// rivertest does.
package filatest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// DB is a migrated database of one test's own.
type DB struct {
	// Name is the database's name.
	Name string
	// DSN reaches it, through PgBouncer when FILA_TEST_PGBOUNCER_URL is set;
	// DirectDSN always reaches PostgreSQL directly (a runtime's ListenDSN).
	DSN, DirectDSN string
	// Pool is open on DSN and closed at the test's end.
	Pool *pgxpool.Pool
}

// DBOption configures NewDB.
type DBOption func(*dbOptions)

type dbOptions struct{ prefix string }

// Prefix names the database prefix_ and random hex instead of fila_test_…:
// lower-case letters, digits and _, starting with a letter, up to 50.
// Several applications' tests on one server can then tell their databases
// apart (and clean up after a crash by name).
func Prefix(prefix string) DBOption { return func(o *dbOptions) { o.prefix = prefix } }

// NewDB creates a database with Fila's tables for t alone, and drops it
// when t ends.
func NewDB(t testing.TB, opts ...DBOption) *DB {
	t.Helper()
	o := dbOptions{prefix: "fila_test"}
	for _, opt := range opts {
		opt(&o)
	}
	if err := testdb.CheckPrefix(o.prefix); err != nil {
		t.Fatalf("filatest: %v", err)
	}
	db := testdb.NewNamed(t, o.prefix)
	if _, err := migrations.Migrate(context.Background(), db.Pool); err != nil {
		t.Fatalf("filatest: migrate %s: %v", db.Name, err)
	}
	return &DB{Name: db.Name, DSN: db.DSN, DirectDSN: db.DirectDSN, Pool: db.Pool}
}

// Tx begins a transaction on db's pool that is rolled back when t ends:
// whatever the test writes in it, jobs included, leaves no trace.
func (db *DB) Tx(t testing.TB) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("filatest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Job is a job of args type T as the test finds it: its args decoded and
// its row.
type Job[T runtime.JobArgs] struct {
	Args T
	Row  *runtime.JobRow
}

// RequireOpts are what RequireInsertedTx checks of the job besides its
// kind; each zero field is not checked.
type RequireOpts struct {
	Queue       string
	Priority    int16
	MaxAttempts int
	State       string
	// Tags must each be among the job's tags.
	Tags []string
	// Metadata must each be in the job's metadata, with the same JSON value.
	Metadata map[string]any
	// ScheduledAt is when the job is due (its run_at), to the microsecond
	// PostgreSQL keeps.
	ScheduledAt time.Time
}

// insertedSQL lists the jobs of one kind, oldest first.
const insertedSQL = `SELECT id FROM fila_jobs WHERE kind = $1::text ORDER BY id`

// InsertedTx returns every job of T's kind that tx sees, oldest first,
// with its args decoded. It fails t only when the database cannot be read
// or a payload does not decode into T.
func InsertedTx[T runtime.JobArgs](ctx context.Context, t testing.TB, tx runtime.DB) []Job[T] {
	t.Helper()
	var zero T
	rows, err := tx.Query(ctx, insertedSQL, zero.Kind())
	if err != nil {
		t.Fatalf("filatest: jobs of kind %q: %v", zero.Kind(), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("filatest: jobs of kind %q: %v", zero.Kind(), err)
	}
	jobs := make([]Job[T], 0, len(ids))
	for _, id := range ids {
		row, err := runtime.GetJob(ctx, tx, id)
		if err != nil {
			t.Fatalf("filatest: %v", err)
		}
		var args T
		if err := json.Unmarshal(row.Payload, &args); err != nil {
			t.Fatalf("filatest: job %d of kind %q: payload %s does not decode into %T: %v", id, zero.Kind(), row.Payload, args, err)
		}
		jobs = append(jobs, Job[T]{Args: args, Row: row})
	}
	return jobs
}

// RequireInsertedTx fails t unless tx sees a job of T's kind that matches
// opts (nil checks the kind alone), and returns the newest such job with
// its args decoded, for the test to compare with what it expects.
func RequireInsertedTx[T runtime.JobArgs](ctx context.Context, t testing.TB, tx runtime.DB, opts *RequireOpts) Job[T] {
	t.Helper()
	jobs := InsertedTx[T](ctx, t, tx)
	var zero T
	if len(jobs) == 0 {
		t.Fatalf("filatest: no job of kind %q (%T) was inserted", zero.Kind(), zero)
	}
	var reasons []string
	for i := len(jobs) - 1; i >= 0; i-- {
		why := mismatch(jobs[i].Row, opts)
		if why == "" {
			return jobs[i]
		}
		reasons = append(reasons, fmt.Sprintf("job %d: %s", jobs[i].Row.ID, why))
	}
	t.Fatalf("filatest: %d job(s) of kind %q were inserted, none as required: %v", len(jobs), zero.Kind(), reasons)
	return Job[T]{}
}

// Expected is one job RequireManyInsertedTx expects: of Args' kind (Args
// serves only for its Kind), matching Opts (nil: the kind alone).
type Expected struct {
	Args runtime.JobArgs
	Opts *RequireOpts
}

// manyInsertedSQL lists the jobs of some kinds, oldest first.
const manyInsertedSQL = `SELECT id FROM fila_jobs WHERE kind = ANY($1::text[]) ORDER BY id`

// RequireManyInsertedTx fails t unless the jobs tx sees of the kinds
// expected names are exactly expected, in the order they were inserted,
// each matching its Opts; it returns their rows in that order. A job of
// another kind is not looked at.
func RequireManyInsertedTx(ctx context.Context, t testing.TB, tx runtime.DB, expected []Expected) []*runtime.JobRow {
	t.Helper()
	if len(expected) == 0 {
		t.Fatalf("filatest: RequireManyInsertedTx: no job expected (use RequireNotInsertedTx)")
	}
	var kinds []string
	for i, e := range expected {
		if e.Args == nil {
			t.Fatalf("filatest: RequireManyInsertedTx: expected job %d has no Args", i)
		}
		if !slices.Contains(kinds, e.Args.Kind()) {
			kinds = append(kinds, e.Args.Kind())
		}
	}
	rows, err := tx.Query(ctx, manyInsertedSQL, kinds)
	if err != nil {
		t.Fatalf("filatest: jobs of kinds %v: %v", kinds, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("filatest: jobs of kinds %v: %v", kinds, err)
	}
	jobs := make([]*runtime.JobRow, len(ids))
	got := make([]string, len(ids))
	for i, id := range ids {
		if jobs[i], err = runtime.GetJob(ctx, tx, id); err != nil {
			t.Fatalf("filatest: %v", err)
		}
		got[i] = jobs[i].Kind
	}
	want := make([]string, len(expected))
	for i, e := range expected {
		want[i] = e.Args.Kind()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("filatest: jobs inserted, in order: kinds %v, not %v", got, want)
	}
	for i, e := range expected {
		if why := mismatch(jobs[i], e.Opts); why != "" {
			t.Fatalf("filatest: job %d (the %d. expected, kind %q): %s", jobs[i].ID, i+1, want[i], why)
		}
	}
	return jobs
}

// RequireNotInsertedTx fails t if tx sees any job of T's kind.
func RequireNotInsertedTx[T runtime.JobArgs](ctx context.Context, t testing.TB, tx runtime.DB) {
	t.Helper()
	if jobs := InsertedTx[T](ctx, t, tx); len(jobs) > 0 {
		var zero T
		t.Fatalf("filatest: %d job(s) of kind %q were inserted, the first with payload %s", len(jobs), zero.Kind(), jobs[0].Row.Payload)
	}
}

// mismatch says how j differs from opts, "" if it does not.
func mismatch(j *runtime.JobRow, o *RequireOpts) string {
	if o == nil {
		return ""
	}
	switch {
	case o.Queue != "" && j.Queue != o.Queue:
		return fmt.Sprintf("queue %q, not %q", j.Queue, o.Queue)
	case o.Priority != 0 && j.Priority != o.Priority:
		return fmt.Sprintf("priority %d, not %d", j.Priority, o.Priority)
	case o.MaxAttempts != 0 && j.MaxAttempts != o.MaxAttempts:
		return fmt.Sprintf("max attempts %d, not %d", j.MaxAttempts, o.MaxAttempts)
	case o.State != "" && j.State != o.State:
		return fmt.Sprintf("state %s, not %s", j.State, o.State)
	case !o.ScheduledAt.IsZero() && !j.RunAt.Equal(o.ScheduledAt.Round(time.Microsecond)):
		return fmt.Sprintf("scheduled at %s, not %s", j.RunAt.Format(time.RFC3339Nano), o.ScheduledAt.Format(time.RFC3339Nano))
	}
	for _, tag := range o.Tags {
		if !slices.Contains(j.Tags, tag) {
			return fmt.Sprintf("tags %v lack %q", j.Tags, tag)
		}
	}
	if len(o.Metadata) > 0 {
		var have map[string]any
		_ = json.Unmarshal(j.Metadata, &have)
		for k, v := range o.Metadata {
			want, _ := json.Marshal(v)
			var w any
			_ = json.Unmarshal(want, &w)
			if got, ok := have[k]; !ok || !reflect.DeepEqual(got, w) {
				return fmt.Sprintf("metadata %s has %s = %v, not %s", j.Metadata, k, got, want)
			}
		}
	}
	return ""
}

// Worker runs one kind's handler on one job at a time, synchronously, in a
// test's transaction (see runtime.WorkTx).
type Worker struct {
	kind       runtime.Kind
	middleware []runtime.Middleware
}

// NewWorker returns a Worker for kind (runtime.Work(handler) for a typed
// one), its handler wrapped in middleware, the first outermost.
func NewWorker(t testing.TB, kind runtime.Kind, middleware ...runtime.Middleware) *Worker {
	t.Helper()
	if err := runtime.ValidateKind(kind.Name); err != nil {
		t.Fatalf("filatest: %v", err)
	}
	if kind.Handler == nil {
		t.Fatalf("filatest: kind %q has no Handler", kind.Name)
	}
	return &Worker{kind: kind, middleware: middleware}
}

// WorkTx inserts args (with opts over what its type declares) in tx and
// runs one attempt of it at once: the handler sees the job as a worker's
// handler would, and its outcome is written in tx. The result holds what
// the handler returned, the outcome, and the job's row. t fails only if
// the job cannot be inserted or run, never for the handler's own error.
func (w *Worker) WorkTx(ctx context.Context, t testing.TB, tx pgx.Tx, args runtime.JobArgs, opts *runtime.InsertOpts) runtime.WorkResult {
	t.Helper()
	if args.Kind() != w.kind.Name {
		t.Fatalf("filatest: args of kind %q given to the worker of kind %q", args.Kind(), w.kind.Name)
	}
	res, err := runtime.InsertArgsTx(ctx, tx, args, opts)
	if err != nil {
		t.Fatalf("filatest: insert: %v", err)
	}
	return w.WorkJobTx(ctx, t, tx, res.ID)
}

// dueNowSQL makes a pending job due at the transaction's now(): inside
// one transaction now() stands still, so a job retried or snoozed in it
// (or inserted with a later RunAt) would never come due there.
const dueNowSQL = `UPDATE fila_jobs SET run_at = now() WHERE id = $1::bigint AND state = 'pending' AND run_at > now()`

// WorkJobTx runs one attempt of the job id, already in tx (inserted by the
// code under test, say), as WorkTx does. A pending job not due yet — one
// an earlier WorkJobTx retried or snoozed, or one scheduled later — is
// run now, as a test that asks for it means.
func (w *Worker) WorkJobTx(ctx context.Context, t testing.TB, tx pgx.Tx, id int64) runtime.WorkResult {
	t.Helper()
	if _, err := tx.Exec(ctx, dueNowSQL, id); err != nil {
		t.Fatalf("filatest: make job %d due: %v", id, err)
	}
	res, err := runtime.WorkTx(ctx, tx, w.kind, w.middleware, id)
	if err != nil {
		t.Fatalf("filatest: %v", err)
	}
	return res
}
