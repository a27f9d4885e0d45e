package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// One handler error PostgreSQL cannot store (NUL, invalid UTF-8) must not
// wedge the worker: the jobs after it complete at their first attempt, and
// the bad job keeps its own error, cleaned.
func TestUnstorableErrorTextDoesNotWedgeTheWorker(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "bad", Handler: func(context.Context, *runtime.Job) error {
			return errors.New("bad \x00 \xff\xfe end")
		}},
		runtime.Kind{Name: "noop", Handler: func(context.Context, *runtime.Job) error { return nil }},
	)
	cfg.Lease = 2 * time.Second
	start(t, cfg)
	bad, err := runtime.Insert(ctx, db.Pool, "bad", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	params := make([]runtime.InsertParams, 20)
	for i := range params {
		params[i] = runtime.InsertParams{Kind: "noop"}
	}
	ids, err := runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "every job settled", func() bool {
		return countState(t, db, "completed") == len(ids) && countState(t, db, "dead") == 1
	})
	for _, id := range ids {
		_, attempts, _ := jobState(t, db, id)
		require.Equal(t, 1, attempts, "job %d ran again", id)
	}
	_, _, lastErr := jobState(t, db, bad)
	require.Equal(t, "bad \u2400 \uFFFD end", lastErr, "the job's own error, made storable")
}

// Workers on one queue that handle different kinds take only their own
// jobs: none is failed by a worker that cannot run it.
func TestMixedKindsOnOneQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var ranA, ranB atomic.Int32
	cfgA := baseConfig(t, db, runtime.Kind{Name: "ka", Handler: func(context.Context, *runtime.Job) error {
		ranA.Add(1)
		return nil
	}})
	cfgB := baseConfig(t, db, runtime.Kind{Name: "kb", Handler: func(context.Context, *runtime.Job) error {
		ranB.Add(1)
		return nil
	}})
	start(t, cfgA)
	start(t, cfgB)
	var params []runtime.InsertParams
	for i := 0; i < 20; i++ {
		params = append(params, runtime.InsertParams{Kind: "ka", InsertOpts: runtime.InsertOpts{MaxAttempts: 1}},
			runtime.InsertParams{Kind: "kb", InsertOpts: runtime.InsertOpts{MaxAttempts: 1}})
	}
	_, err := runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "all 40 completed", func() bool { return countState(t, db, "completed") == 40 })
	require.Zero(t, countState(t, db, "dead"))
	require.EqualValues(t, 20, ranA.Load())
	require.EqualValues(t, 20, ranB.Load())
	// Each (queue, kind) is registered, for `fila enqueue`'s check.
	var registered []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(queue || '/' || kind ORDER BY kind) FROM fila_kinds`).Scan(&registered))
	require.Equal(t, []string{"default/ka", "default/kb"}, registered)
}

// A job that comes due while every worker is idle starts at its run_at, not
// at the next safety poll (10 minutes here), whoever wrote it: Insert with
// RunAt, a plain SQL INSERT, an UPDATE back to pending, a RunAt a few
// milliseconds ahead.
func TestScheduledJobsStartOnTimeWhileIdle(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	startedAt := map[int64]time.Time{} // database clock
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		mu.Lock()
		startedAt[j.ID] = j.StartedAt
		mu.Unlock()
		return nil
	}}))
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	viaInsert, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{RunAt: now.Add(1500 * time.Millisecond)})
	require.NoError(t, err)
	soon, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{RunAt: now.Add(30 * time.Millisecond)})
	require.NoError(t, err)
	var viaSQL, viaUpdate int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, run_at) VALUES ('k', now() + interval '1 second') RETURNING id`).Scan(&viaSQL))
	// A dead job an operator sets back to pending, due in a second.
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, finished_at, attempts, max_attempts)
		VALUES ('k', 'dead', now(), 1, 1) RETURNING id`).Scan(&viaUpdate))
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'pending', attempts = 0, finished_at = NULL,
		run_at = now() + interval '1 second' WHERE id = $1::bigint`, viaUpdate)
	require.NoError(t, err)

	ids := []int64{viaInsert, soon, viaSQL, viaUpdate}
	waitFor(t, 20*time.Second, "every scheduled job ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(startedAt) == len(ids)
	})
	var worst time.Duration
	for _, id := range ids {
		var runAt time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT run_at FROM fila_jobs WHERE id = $1::bigint", id).Scan(&runAt))
		mu.Lock()
		late := startedAt[id].Sub(runAt)
		mu.Unlock()
		require.GreaterOrEqual(t, late, time.Duration(0), "job %d started before its run_at", id)
		worst = max(worst, late)
	}
	t.Logf("worst lateness after run_at: %s", worst)
	// A noisy machine may add some delay; the safety poll would add minutes.
	require.Less(t, worst, 3*time.Second, "a job waited for a poll instead of its timer")
}

// A handler that ignores cancellation and returns after Run has returned
// (past HardStopGrace) must not crash the process; its job comes back when
// its lease expires.
func TestHandlerReturningAfterRunReturnedIsHarmless(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	release := make(chan struct{})
	returned := make(chan struct{})
	started := make(chan struct{}, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "deaf", Handler: func(ctx context.Context, j *runtime.Job) error {
		defer close(returned)
		started <- struct{}{}
		<-release // deaf to ctx
		return errors.New("too late")
	}})
	cfg.HardStopGrace = 100 * time.Millisecond
	cfg.Lease = 2 * time.Second
	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Logger = zap.New(zapcore.NewTee(cfg.Logger.Core(), core))
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	<-rt.Ready()
	id, err := runtime.Insert(context.Background(), db.Pool, "deaf", nil, nil)
	require.NoError(t, err)
	<-started
	claimed := time.Now()
	cancel() // a hard stop
	// Run says the attempt it gave up on has no outcome.
	err = <-errc
	require.ErrorIs(t, err, runtime.ErrOutcomesNotWritten)
	require.Contains(t, err.Error(), ": 1 job;")
	close(release)
	<-returned
	state, attempts, _ := jobState(t, db, id)
	require.Equal(t, "running", state, "the abandoned attempt is left to its lease")
	require.Equal(t, 1, attempts)
	// The attempt's deadline passes after Run returned: nothing of the
	// runtime acts, or logs, any more.
	deadline := claimed.Add(cfg.Lease)
	waitFor(t, 10*time.Second, "the abandoned attempt's deadline passed", func() bool { return time.Now().After(deadline) })
	require.Zero(t, logs.FilterMessageSnippet("lease not renewed").Len(), "a deadline fired after Run returned")
}

// When a stalled handler loses its lease and the same worker claims the job
// again, the stalled handler's return must not touch the new attempt: the
// new attempt keeps its lease for as long as it runs, and completes.
func TestSameWorkerReclaimKeepsTheNewAttemptOwned(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	lease := time.Second
	firstRelease := make(chan struct{})
	firstReturned := make(chan struct{})
	attempts := make(chan int, 4)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		attempts <- j.Attempt
		if j.Attempt == 1 {
			<-firstRelease // stalled, deaf to cancellation
			close(firstReturned)
			return nil
		}
		// The second attempt runs for three leases after the first returned.
		<-firstReturned
		select {
		case <-time.After(3 * lease):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}})
	cfg.Lease = lease
	cfg.UnhealthyPoll, cfg.SafetyPoll = 100*time.Millisecond, time.Second
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, <-attempts)
	// The first attempt's lease ran out (as when its heartbeats cannot get
	// through) and a claim rescued it, as fila_claim does; this same worker
	// is woken and claims it again.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'pending', lease_until = NULL, run_at = now(),
		last_error = 'lease expired' WHERE id = $1::bigint`, id)
	require.NoError(t, err)
	select {
	case a := <-attempts:
		require.Equal(t, 2, a)
	case <-time.After(10 * time.Second):
		t.Fatal("the rescued job was not claimed again")
	}
	close(firstRelease)
	waitFor(t, 20*time.Second, "the second attempt completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	_, n, _ := jobState(t, db, id)
	require.Equal(t, 2, n, "the second attempt was never rescued while it ran")
	select {
	case a := <-attempts:
		t.Fatalf("attempt %d ran: the second attempt lost its lease", a)
	default:
	}
}

// A job's lease is kept until its outcome is written, however long the
// writer takes: another worker never runs a job whose handler succeeded.
func TestLeaseKeptUntilOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	lease := time.Second
	// Writing the outcome of a "slowwrite" job takes three leases: the
	// writer is busy, and every outcome queued behind it waits.
	_, err := db.Pool.Exec(ctx, `
CREATE FUNCTION slow_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind = 'slowwrite' AND NEW.state = 'completed' THEN
        PERFORM pg_sleep(3);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow_write BEFORE UPDATE ON fila_jobs FOR EACH ROW EXECUTE FUNCTION slow_write();`)
	require.NoError(t, err)
	var runs sync.Map // job id -> *atomic.Int32
	count := func(id int64) {
		v, _ := runs.LoadOrStore(id, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	slowStarted := make(chan struct{}, 1)
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "slowwrite", Handler: func(ctx context.Context, j *runtime.Job) error {
			count(j.ID)
			slowStarted <- struct{}{}
			return nil
		}},
		runtime.Kind{Name: "fast", Handler: func(ctx context.Context, j *runtime.Job) error {
			count(j.ID)
			return nil
		}},
	)
	cfg.Lease = lease
	start(t, cfg)
	slow, err := runtime.Insert(ctx, db.Pool, "slowwrite", nil, nil)
	require.NoError(t, err)
	<-slowStarted
	waitFor(t, 10*time.Second, "the slow outcome is being written", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep'`).Scan(&n))
		return n == 1
	})
	fast, err := runtime.Insert(ctx, db.Pool, "fast", nil, nil)
	require.NoError(t, err)
	// A second worker that rescues expired leases often and runs "fast".
	rescuer := baseConfig(t, db, runtime.Kind{Name: "fast", Handler: func(ctx context.Context, j *runtime.Job) error {
		count(j.ID)
		return nil
	}})
	rescuer.Mode = runtime.ModePoll
	rescuer.PollMin, rescuer.PollMax = 50*time.Millisecond, 50*time.Millisecond
	start(t, rescuer)
	waitFor(t, 20*time.Second, "both completed", func() bool {
		a, _, _ := jobState(t, db, slow)
		b, _, _ := jobState(t, db, fast)
		return a == "completed" && b == "completed"
	})
	for _, id := range []int64{slow, fast} {
		v, _ := runs.Load(id)
		require.EqualValues(t, 1, v.(*atomic.Int32).Load(), "job %d ran more than once", id)
		_, attempts, _ := jobState(t, db, id)
		require.Equal(t, 1, attempts)
	}
}

// With the listen DSN unreachable, the runtime still claims, by polling,
// and fila_workers says its wake source is down, and why.
func TestClaimsWhileTheWakeSourceIsDown(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.ListenDSN = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"
	cfg.UnhealthyPoll = 100 * time.Millisecond
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	defer func() { cancel(); require.NoError(t, <-errc) }()
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the job ran without a wake source", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	select {
	case <-rt.Ready():
		t.Fatal("Ready closed although the wake source never came up")
	default:
	}
	waitFor(t, 10*time.Second, "fila_workers says the wake source is down, with the reason", func() bool {
		var state string
		var reason *string
		err := db.Pool.QueryRow(ctx, `SELECT wake_source, wake_error FROM fila_workers`).Scan(&state, &reason)
		return err == nil && state == "down" && reason != nil && *reason != "" && *reason != "not connected yet"
	})
}

// A listen DSN that reaches another database than the main DSN's is refused
// at start, naming both.
func TestListenDSNToAnotherDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	other := newDB(t)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.ListenDSN = other.DirectDSN
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = rt.Run(ctx)
	require.ErrorIs(t, err, listener.ErrOtherDatabase)
	require.ErrorContains(t, err, "ListenDSN")
	require.ErrorContains(t, err, db.Name)
	require.ErrorContains(t, err, other.Name)
}

// A notify-mode worker started while the insert trigger is off says so.
func TestNotifyWorkerWarnsWhenTheTriggerIsOff(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	require.NoError(t, runtime.SetNotifyTrigger(ctx, db.Pool, false))
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.Logger = zap.New(core)
	start(t, cfg)
	require.NotZero(t, logs.FilterMessageSnippet("trigger").Len(), "no warning about the trigger")
	var mode string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT mode FROM fila_workers`).Scan(&mode))
	require.Equal(t, "notify", mode)
}

// Each queue has its own concurrency: a queue whose handlers are all busy
// does not keep another queue's job waiting.
func TestBusyQueueDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	hold := make(chan struct{})
	defer close(hold)
	bRan := make(chan struct{})
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "busy", Handler: func(ctx context.Context, j *runtime.Job) error {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return nil
		}},
		runtime.Kind{Name: "quick", Handler: func(context.Context, *runtime.Job) error { close(bRan); return nil }},
	)
	cfg.Queues = []string{"a", "b"}
	cfg.Concurrency = 3
	start(t, cfg)
	params := make([]runtime.InsertParams, 10)
	for i := range params {
		params[i] = runtime.InsertParams{Kind: "busy", InsertOpts: runtime.InsertOpts{Queue: "a"}}
	}
	_, err := runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "queue a busy", func() bool { return countState(t, db, "running") == 3 })
	_, err = runtime.Insert(ctx, db.Pool, "quick", nil, &runtime.InsertOpts{Queue: "b"})
	require.NoError(t, err)
	select {
	case <-bRan:
	case <-time.After(10 * time.Second):
		t.Fatal("queue b's job waited behind queue a")
	}
}

// With a shared MaxConcurrency below the queues' own, a queue waiting for a
// slot gets the next one that frees, however busy the other queue is.
func TestMaxConcurrencySharedInTurn(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	var running, peak atomic.Int32
	work := func(queue string) runtime.Handler {
		return func(ctx context.Context, j *runtime.Job) error {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			mu.Lock()
			order = append(order, queue)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			return nil
		}
	}
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "ka", Handler: work("a")},
		runtime.Kind{Name: "kb", Handler: work("b")},
	)
	cfg.Queues = []string{"a", "b"}
	cfg.Concurrency = 4
	cfg.MaxConcurrency = 2
	start(t, cfg)
	var params []runtime.InsertParams
	for i := 0; i < 40; i++ {
		params = append(params, runtime.InsertParams{Kind: "ka", InsertOpts: runtime.InsertOpts{Queue: "a"}})
	}
	_, err := runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "queue a started", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= 2 })
	_, err = runtime.Insert(ctx, db.Pool, "kb", nil, &runtime.InsertOpts{Queue: "b"})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "all done", func() bool { return countState(t, db, "completed") == 41 })
	require.LessOrEqual(t, peak.Load(), int32(2), "MaxConcurrency exceeded")
	mu.Lock()
	defer mu.Unlock()
	pos := -1
	for i, q := range order {
		if q == "b" {
			pos = i
		}
	}
	require.GreaterOrEqual(t, pos, 0)
	require.Less(t, pos, 12, "queue b's job waited for most of queue a's backlog: %v", order)
}

// A hard stop gives an interrupted job back without using up an attempt:
// a job with a single attempt runs to completion afterwards.
func TestHardStopDoesNotUseUpTheLastAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}})
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()
	<-rt.Ready()
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	<-started
	cancel()
	require.NoError(t, <-errc)
	state, attempts, _ := jobState(t, db, id)
	require.Equal(t, "pending", state)
	require.Equal(t, 0, attempts)

	ran := make(chan int, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.Attempt
		return nil
	}}))
	require.Equal(t, 1, <-ran, "attempt 1 of 1 again, never 2 of 1")
	waitFor(t, 10*time.Second, "completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
}

// A job cancelled while it runs has its handler's context cancelled with
// ErrCancelled within a heartbeat, and nothing more is written for it.
func TestCancelledRunningJobStopsItsHandler(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}})
	cfg.Lease = time.Second
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	<-started
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'cancelled', finished_at = now(), lease_until = NULL WHERE id = $1::bigint`, id)
	require.NoError(t, err)
	select {
	case c := <-cause:
		require.ErrorIs(t, c, runtime.ErrCancelled)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler of a cancelled job was not stopped")
	}
	// Stop returns once every outcome is written: nothing was.
	require.NoError(t, rt.Stop(ctx))
	state, _, _ := jobState(t, db, id)
	require.Equal(t, "cancelled", state)
	require.EqualValues(t, 1, rt.Stats().Cancelled)
}
