package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/runtime"
)

// handlerRun is what a test handler saw of one attempt.
type handlerRun struct {
	attempt    int
	started    time.Time
	ended      time.Time
	cause      error     // the context's cause, if it was cancelled
	ownedUntil time.Time // job.OwnedUntil() when the context was cancelled
}

// runRecorder is a handler that records each run and waits for its context
// or for hold to pass.
type runRecorder struct {
	hold    atomic.Int64 // a time.Duration: the test shortens it while handlers run
	mu      sync.Mutex
	runs    []handlerRun
	started chan struct{} // one value per run start
}

func newRunRecorder(hold time.Duration) *runRecorder {
	r := &runRecorder{started: make(chan struct{}, 16)}
	r.hold.Store(int64(hold))
	return r
}

func (r *runRecorder) handle(ctx context.Context, j *runtime.Job) error {
	run := handlerRun{attempt: j.Attempt, started: time.Now()}
	r.started <- struct{}{}
	select {
	case <-ctx.Done():
		run.cause, run.ownedUntil = context.Cause(ctx), j.OwnedUntil()
	case <-time.After(time.Duration(r.hold.Load())):
	}
	run.ended = time.Now()
	r.mu.Lock()
	r.runs = append(r.runs, run)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *runRecorder) snapshot() []handlerRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]handlerRun(nil), r.runs...)
}

func (r *runRecorder) waitStart(t *testing.T) {
	t.Helper()
	select {
	case <-r.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
}

// noOverlap fails if any run started before the one before it ended.
func noOverlap(t *testing.T, runs []handlerRun) {
	t.Helper()
	for i := 1; i < len(runs); i++ {
		require.False(t, runs[i].started.Before(runs[i-1].ended),
			"run %d (attempt %d) started %s before run %d ended", i, runs[i].attempt,
			runs[i-1].ended.Sub(runs[i].started), i-1)
	}
}

// leaseUntil reads the job's lease end inside tx, which holds a lock that
// keeps every heartbeat from changing it.
func leaseUntil(t *testing.T, tx pgx.Tx, id int64) time.Time {
	t.Helper()
	var until time.Time
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT lease_until FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&until))
	return until
}

// A transaction holding the running job's row (SELECT … FOR UPDATE) longer
// than the lease makes every heartbeat find the row locked. That is not a
// renewal: the worker stops the handler before the lease it could not
// renew runs out, and the job runs again only after that.
func TestRowLockedLongerThanTheLeaseStopsTheHandlerFirst(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rec := newRunRecorder(time.Minute)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: rec.handle})
	cfg.Lease = 1500 * time.Millisecond
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	rec.waitStart(t)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, id)
	require.NoError(t, err)
	until := leaseUntil(t, tx, id) // final while the lock is held
	waitFor(t, 3*cfg.Lease, "the handler stopped", func() bool { return len(rec.snapshot()) == 1 })
	first := rec.snapshot()[0]
	require.ErrorIs(t, first.cause, runtime.ErrLeaseLost)
	require.ErrorIs(t, first.cause, runtime.ErrLeaseDeadline)
	require.True(t, first.ended.Before(until), "the handler ran until %s, past its lease's end %s", first.ended, until)
	require.True(t, first.ownedUntil.Before(until), "OwnedUntil %s is not before the lease's end %s", first.ownedUntil, until)
	t.Logf("handler stopped %s before the lease's end", until.Sub(first.ended))
	// Hold the lock past the lease's end, on the database's clock, then let
	// go: the job runs again, never beside the stopped run.
	waitFor(t, 10*time.Second, "the lease's end on the database's clock", func() bool {
		var past bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT now() > $1::timestamptz`, until).Scan(&past))
		return past
	})
	require.NoError(t, tx.Commit(ctx))
	rec.hold.Store(0)
	waitFor(t, 10*time.Second, "the job ran again and completed", func() bool {
		s, _, _ := jobState(t, db, id)
		return s == "completed"
	})
	runs := rec.snapshot()
	require.Len(t, runs, 2)
	noOverlap(t, runs)
	require.EqualValues(t, 1, rt.Stats().LeaseLost)
}

// An insert into a table with a foreign key to fila_jobs(id) takes FOR KEY
// SHARE on the job's row, for as long as its transaction lasts. Heartbeats
// and outcomes take the weaker FOR NO KEY UPDATE, which does not conflict
// with it: the lease is kept, and the job completes at its first attempt.
func TestForeignKeyToARunningJobKeepsItsLease(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE receipts (job_id bigint NOT NULL REFERENCES fila_jobs (id))`)
	require.NoError(t, err)
	rec := newRunRecorder(3 * time.Second)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: rec.handle})
	cfg.Lease = time.Second
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	rec.waitStart(t)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO receipts (job_id) VALUES ($1::bigint)`, id)
	require.NoError(t, err)
	// Held past the lease, while the handler runs.
	time.Sleep(2 * cfg.Lease)
	require.NoError(t, tx.Commit(ctx))
	waitFor(t, 10*time.Second, "the job completed", func() bool {
		s, _, _ := jobState(t, db, id)
		return s == "completed"
	})
	_, attempts, _ := jobState(t, db, id)
	require.Equal(t, 1, attempts)
	runs := rec.snapshot()
	require.Len(t, runs, 1, "the job ran again")
	require.NoError(t, runs[0].cause)
	require.Zero(t, rt.Stats().LeaseLost)
}

// A heartbeat that never answers (here every statement on fila_jobs waits
// behind a table lock, as statements do behind a network path gone silent)
// returns no error before the lease could run out. The handler is stopped
// by the attempt's own deadline, before the lease's end, not when some
// heartbeat finally fails.
func TestSilentDatabaseStopsTheHandlerBeforeItsLease(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rec := newRunRecorder(time.Minute)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: rec.handle})
	cfg.Lease = 1500 * time.Millisecond
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	rec.waitStart(t)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE fila_jobs IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	until := leaseUntil(t, tx, id)
	waitFor(t, 3*cfg.Lease, "the handler stopped", func() bool { return len(rec.snapshot()) == 1 })
	require.NoError(t, tx.Rollback(ctx))
	first := rec.snapshot()[0]
	require.True(t, errors.Is(first.cause, runtime.ErrLeaseDeadline), "cause: %v", first.cause)
	require.True(t, first.ended.Before(until), "the handler ran until %s, past its lease's end %s", first.ended, until)
	t.Logf("handler stopped %s before the lease's end", until.Sub(first.ended))
}

// A handler still running shortly after its claim gets a heartbeat at once,
// not a third of a lease later: it records in the row that a worker runs the
// attempt, so that the rescue of an attempt no worker was seen to run (its
// claim's reply lost) can give that attempt back. OwnedUntil moves with it.
func TestFirstHeartbeatComesSoonAfterTheClaim(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	jobs := make(chan *runtime.Job, 1)
	release := make(chan struct{})
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		jobs <- j
		<-release
		return nil
	}})
	cfg.Lease = time.Minute
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	j := within(t, jobs, "the handler started")
	defer close(release)
	first := j.OwnedUntil()
	require.WithinDuration(t, time.Now().Add(cfg.Lease*5/6), first, 5*time.Second)
	renewed := false
	for deadline := time.After(10 * time.Second); !renewed; {
		select {
		case <-j.Renewed():
			renewed = j.OwnedUntil().After(first) // the first value may be the claim's own
		case <-deadline:
			t.Fatal("no heartbeat within 10 s of the claim, with a lease of a minute")
		}
	}
	var seen bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT heartbeat_at >= started_at FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&seen))
	require.True(t, seen)
}

// A stop whose database does not answer (every statement on fila_jobs waits
// behind a table lock, as statements do behind a dead network path) still
// ends within its deadline plus HardStopGrace, and says how many outcomes it
// could not write. The jobs are not lost: once the database answers, their
// leases expire and another worker runs them.
func TestStopWithTheDatabaseDownKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 2)
	finish := make(chan struct{})
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		if j.Payload[0] == '1' {
			<-finish
			return nil // finishes once the database is locked: its outcome cannot be written
		}
		<-ctx.Done() // runs until cancelled
		return ctx.Err()
	}})
	cfg.Lease = 3 * time.Second
	cfg.HardStopGrace = time.Second
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(ctx) }()
	select {
	case <-rt.Ready():
	case err := <-runErr:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the runtime was not ready within 30 s")
	}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('k', '1'), ('k', '2')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	within(t, started, "the first handler started")
	within(t, started, "the second handler started")
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx)
	_, err = lock.Exec(ctx, `LOCK TABLE fila_jobs IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	close(finish)

	const shutdown = time.Second
	stopCtx, cancel := context.WithTimeout(ctx, shutdown)
	defer cancel()
	begun := time.Now()
	require.ErrorIs(t, rt.Stop(stopCtx), context.DeadlineExceeded)
	err = <-runErr
	took := time.Since(begun)
	t.Logf("stopped %s after Stop (shutdown %s, HardStopGrace %s): %v", took.Round(time.Millisecond), shutdown, cfg.HardStopGrace, err)
	require.ErrorIs(t, err, runtime.ErrOutcomesNotWritten)
	require.Contains(t, err.Error(), "2 jobs")
	// Statements already sent may run a moment past their context: allow
	// a second on top of deadline and grace (against cleanupTimeout's 30 s).
	require.Less(t, took, shutdown+cfg.HardStopGrace+time.Second, "the stop outlasted its deadline")
	require.NoError(t, lock.Rollback(ctx))

	// Nothing is lost: another worker runs both once their leases expire.
	cfg.HardStopGrace = 0
	cfg.Kinds[0].Handler = func(context.Context, *runtime.Job) error { return nil }
	start(t, cfg)
	waitFor(t, 3*cfg.Lease, "both jobs completed", func() bool { return countState(t, db, "completed") == 2 })
}

// A stop longer than the lease, with the database not answering: the
// running handler is stopped at its lease deadline during the stop, and its
// job counts among those whose outcome was not written, beside the one
// whose completion the writer could not write.
func TestStopReportsAttemptsWhoseDeadlinePassedDuringIt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 2)
	finish := make(chan struct{})
	lost := make(chan error, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		if j.Payload[0] == '1' {
			<-finish
			return nil
		}
		<-ctx.Done()
		lost <- context.Cause(ctx)
		return ctx.Err()
	}})
	cfg.Lease = 2 * time.Second
	cfg.HardStopGrace = time.Second
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- rt.Run(ctx) }()
	select {
	case <-rt.Ready():
	case err := <-runErr:
		t.Fatalf("Run returned before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the runtime was not ready within 30 s")
	}
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('k', '1'), ('k', '2')`)
	require.NoError(t, err)
	within(t, started, "the first handler started")
	within(t, started, "the second handler started")
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx)
	_, err = lock.Exec(ctx, `LOCK TABLE fila_jobs IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	close(finish)

	// The shutdown deadline is past the lease: the lease deadline, not the
	// stop, ends the second handler.
	stopCtx, cancel := context.WithTimeout(ctx, 2*cfg.Lease)
	defer cancel()
	stopErr := make(chan error, 1)
	go func() { stopErr <- rt.Stop(stopCtx) }()
	require.ErrorIs(t, within(t, lost, "the running handler was stopped"), runtime.ErrLeaseDeadline)
	<-stopErr
	err = <-runErr
	t.Logf("Run returned: %v", err)
	require.ErrorIs(t, err, runtime.ErrOutcomesNotWritten)
	require.Contains(t, err.Error(), "2 jobs")
	require.NoError(t, lock.Rollback(ctx))
}

// A database whose default isolation is SERIALIZABLE: every statement of
// the runtime sets READ COMMITTED itself, so three runtimes drain a backlog
// together without one failed claim, heartbeat or outcome.
func TestDrainUnderSerializableDefault(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	db.SetDefault(t, "default_transaction_isolation", "serializable")
	const jobs = 1500
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, $1::int)`, jobs)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.WarnLevel)
	for range 3 {
		cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
		cfg.Concurrency, cfg.Logger = 50, zap.New(core)
		start(t, cfg)
	}
	waitFor(t, 60*time.Second, "every job completed", func() bool { return countState(t, db, "completed") == jobs })
	var maxAttempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(attempts) FROM fila_jobs`).Scan(&maxAttempts))
	require.Equal(t, 1, maxAttempts)
	for _, e := range logs.All() {
		require.NotEqual(t, zapcore.ErrorLevel, e.Level, "%s: %v", e.Message, e.Context)
		require.NotContains(t, e.Message, "isolation", "the default was read at start: no statement failed first")
	}
}

// A statement_timeout of a few milliseconds on the database (or a role)
// would cancel every claim of a thousand jobs, sent again and again: Fila's
// statements carry their own timeouts instead, and the backlog drains.
func TestDrainUnderATinyStatementTimeout(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const jobs = 5000
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, $1::int)`, jobs)
	require.NoError(t, err)
	db.SetDefault(t, "statement_timeout", "8ms")
	core, logs := observer.New(zapcore.ErrorLevel)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.Concurrency, cfg.Logger = 1000, zap.New(core)
	start(t, cfg)
	// The test's own count runs under the same 8 ms default: it lifts the
	// timeout for its transaction, as a loaded machine may need, and counts
	// again when the BEGIN or the SET before it ran out of time.
	completed := func() int {
		var n int
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		})
		// Through PgBouncer 1.18 (Debian 12's), a cancel request the runtime
		// sent for its own statement, timed out by its own deadline, can
		// reach the server connection once it serves this transaction
		// instead: counted again too.
		var pgErr *pgconn.PgError
		if claimer.IsSessionTimeout(err) || (errors.As(err, &pgErr) && pgErr.Code == "57014") {
			return -1
		}
		require.NoError(t, err)
		return n
	}
	waitFor(t, 60*time.Second, "every job completed", func() bool { return completed() == jobs })
	for _, e := range logs.All() {
		t.Errorf("%s: %v", e.Message, e.Context)
	}
}

// within receives from ch, failing the test if nothing comes within 30 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("not within 30 s: %s", what)
		panic("unreachable")
	}
}
