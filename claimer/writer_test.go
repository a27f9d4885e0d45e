package claimer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
)

// recorder collects what a writer reports.
type recorder struct {
	mu        sync.Mutex
	written   map[claimer.AttemptKey]string
	abandoned map[claimer.AttemptKey]bool
}

func newRecorder() *recorder {
	return &recorder{written: map[claimer.AttemptKey]string{}, abandoned: map[claimer.AttemptKey]bool{}}
}

func (r *recorder) config(t *testing.T) claimer.WriterConfig {
	return claimer.WriterConfig{
		Logger: zaptest.NewLogger(t),
		OnWritten: func(fin []claimer.Finished) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, f := range fin {
				r.written[f.Key] = f.State
			}
		},
		OnAbandoned: func(outs []claimer.Outcome, _ error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, o := range outs {
				r.abandoned[o.Key()] = true
			}
		},
	}
}

func (r *recorder) state(k claimer.AttemptKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.written[k]
	return s, ok
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, within, what, cond)
}

func claimN(t *testing.T, s *claimer.Store, db *testdb.DB, n int) []*claimer.Job {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, $1::int)`, n)
	require.NoError(t, err)
	res, err := s.Claim(ctx, "default", kinds, nil, n, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, n)
	return res.Jobs
}

// An outcome whose row is locked by another session is written later,
// while the outcomes submitted after it are written at once.
func TestWriterLockedRowDoesNotHoldBackOthers(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	jobs := claimN(t, s, db, 3)
	held, rest := jobs[0], jobs[1:]

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, held.ID)
	require.NoError(t, err)

	rec := newRecorder()
	w := claimer.NewWriter(s, rec.config(t))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()

	require.NoError(t, w.Submit(claimer.Outcome{Attempt: held.Attempt, OK: true}))
	for _, j := range rest {
		require.NoError(t, w.Submit(claimer.Outcome{Attempt: j.Attempt, OK: true}))
	}
	waitUntil(t, 5*time.Second, "the unlocked outcomes are written", func() bool {
		for _, j := range rest {
			if st, ok := rec.state(j.Key()); !ok || st != "completed" {
				return false
			}
		}
		return true
	})
	_, written := rec.state(held.Key())
	require.False(t, written, "the locked row cannot have been written yet")
	require.NoError(t, tx.Rollback(ctx))
	waitUntil(t, 5*time.Second, "the locked outcome is written once the lock is gone", func() bool {
		st, ok := rec.state(held.Key())
		return ok && st == "completed"
	})
	w.Close()
	<-done
}

// A batch the database refuses as data is split: the refused outcome is
// written alone with a placeholder error, and every other one as it was.
func TestWriterSplitsBatchRefusedAsData(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	// The database refuses, as invalid data, any error text with "poison":
	// a stand-in for whatever value a server may refuse.
	_, err := db.Pool.Exec(ctx, `
CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.last_error LIKE '%poison%' THEN
        RAISE EXCEPTION 'refused: %', NEW.last_error USING ERRCODE = '22P02';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison BEFORE UPDATE ON fila_jobs FOR EACH ROW EXECUTE FUNCTION refuse_poison();`)
	require.NoError(t, err)
	jobs := claimN(t, s, db, 9)
	poisoned := jobs[4]

	rec := newRecorder()
	w := claimer.NewWriter(s, rec.config(t))
	// Everything goes in before the writer starts: one batch of nine.
	for _, j := range jobs {
		o := claimer.Outcome{Attempt: j.Attempt, OK: true}
		if j == poisoned {
			o = claimer.Outcome{Attempt: j.Attempt, Err: "a poison text", Delay: time.Second}
		}
		require.NoError(t, w.Submit(o))
	}
	w.Close()
	require.NoError(t, w.Run(ctx))

	for _, j := range jobs {
		st, ok := rec.state(j.Key())
		require.True(t, ok, "job %d written", j.ID)
		if j == poisoned {
			require.Equal(t, "pending", st)
			continue
		}
		require.Equal(t, "completed", st)
	}
	_, _, lastErr := jobRow(t, db, poisoned.ID)
	require.Contains(t, lastErr, "could not be stored")
	require.Contains(t, lastErr, "22P02")
}

// Submit after the writer stopped returns an error instead of blocking or
// panicking, and what was queued is reported abandoned.
func TestWriterStoppedAbandons(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	jobs := claimN(t, s, db, 2)
	rec := newRecorder()
	cfg := rec.config(t)
	cfg.Buffer = 1
	w := claimer.NewWriter(s, cfg)
	require.NoError(t, w.Submit(claimer.Outcome{Attempt: jobs[0].Attempt, OK: true}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, w.Run(ctx))
	require.ErrorIs(t, w.Submit(claimer.Outcome{Attempt: jobs[1].Attempt, OK: true}), claimer.ErrWriterStopped)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.True(t, rec.abandoned[jobs[0].Key()])
	st, _, _ := jobRow(t, db, jobs[0].ID)
	require.Equal(t, "running", st, "an abandoned outcome waits for its lease to expire")
}

// An outcome statement that runs out of time is written again in halves,
// and later batches are smaller, instead of the same statement timing out
// for ever while nothing else is written. Here each completed row costs
// 10 ms (a trigger sleeps) and a statement has 300 ms.
func TestWriterShrinksBatchesThatRunOutOfTime(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION slow_finish() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.01); RETURN NEW; END $$;
		CREATE TRIGGER slow_finish BEFORE UPDATE ON fila_jobs FOR EACH ROW
		WHEN (OLD.state = 'running' AND NEW.state = 'completed') EXECUTE FUNCTION slow_finish();
		INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, 100)`)
	require.NoError(t, err)
	res, err := s.Claim(ctx, "default", kinds, nil, 100, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 100)
	rec := newRecorder()
	cfg := rec.config(t)
	cfg.WriteTimeout = 300 * time.Millisecond
	var caps []int
	var capsMu sync.Mutex
	cfg.OnBatchCap = func(n int) { capsMu.Lock(); caps = append(caps, n); capsMu.Unlock() }
	w := claimer.NewWriter(s, cfg)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	// Submitted at once: they go in one or two large batches.
	for _, j := range res.Jobs {
		require.NoError(t, w.Submit(claimer.Outcome{Attempt: j.Attempt, OK: true}))
	}
	waitUntil(t, 60*time.Second, "every outcome written", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.written) == 100
	})
	require.Empty(t, rec.abandoned)
	require.Less(t, w.BatchCap(), 100)
	capsMu.Lock()
	t.Logf("batch caps: %v", caps)
	require.NotEmpty(t, caps)
	capsMu.Unlock()
}

// A completion waits as long as it must for a lock its flow triggers need:
// completing a job locks its waiting dependents, and one held by another
// transaction for longer than the fast path's lock_timeout sends the batch
// to the lock-then-update, which waits for it rather than failing the
// write (a failed write is retried with backoff, every outcome of the batch
// with it).
func TestCompletionWaitsForADependentsLock(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	jobs := claimN(t, s, db, 1)
	dependent := insert(t, db, `INSERT INTO fila_jobs (kind, depends_on) VALUES ('k', ARRAY[$1::bigint]) RETURNING id`, jobs[0].ID)
	st, _, _ := jobRow(t, db, dependent)
	require.Equal(t, "waiting", st)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, dependent)
	require.NoError(t, err)
	// The lock goes once the completion is seen waiting on it: the test
	// then knows the statement met the lock, however slow the machine.
	var lockPID int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockPID))
	released := make(chan error, 1)
	go func() {
		err := waitUntilBlocked(ctx, db, lockPID)
		// Rolled back before the result is sent: the deferred rollback
		// then never runs beside this one on the same connection.
		_ = tx.Rollback(ctx)
		released <- err
	}()
	var waitErr error
	waited := false
	wait := func() error {
		if !waited {
			waitErr, waited = <-released, true
		}
		return waitErr
	}
	defer func() { _ = wait() }() // runs before the deferred rollback

	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: jobs[0].Attempt, OK: true}})
	require.NoError(t, err, "the completion waits for the dependent's lock instead of failing")
	require.NoError(t, wait(), "the completion never waited on the dependent's lock")
	require.Equal(t, "completed", statesByKey(fin)[jobs[0].Key()])
	st, _, _ = jobRow(t, db, dependent)
	require.Equal(t, "pending", st, "the dependent runs once its dependency completed")
}

// The completion's short lock_timeout stays inside it: the caller's
// transaction keeps its own, whichever way the completion went.
func TestCompletionKeepsTheCallersLockTimeout(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	jobs := claimN(t, s, db, 2)
	for _, held := range []bool{false, true} {
		j := jobs[0]
		if held {
			j = jobs[1]
			lock, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = lock.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, j.ID)
			require.NoError(t, err)
			defer func() { _ = lock.Rollback(ctx) }()
		}
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '7s'`)
		require.NoError(t, err)
		var done []int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT ids FROM fila_complete($1::bigint[], $2::int[], $3::timestamptz[])`,
			[]int64{j.ID}, []int32{int32(j.Attempt.Attempt)}, []time.Time{j.StartedAt}).Scan(&done))
		var timeout string
		require.NoError(t, tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout))
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, "7s", timeout, "held row: %v", held)
		if held {
			require.Empty(t, done, "the held row is skipped")
		} else {
			require.Equal(t, []int64{j.ID}, done)
		}
	}
}

// waitUntilBlocked returns once a session waits on a lock held by the
// session pid, or with an error after ten seconds.
func waitUntilBlocked(ctx context.Context, db *testdb.DB, pid int32) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-tick.C {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1::text AND $2::int = ANY (pg_blocking_pids(pid))`, db.Name, pid).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("no session waited on session %d's lock within 10s", pid)
}
