package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func TestInsertRunsJob(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	got := make(chan *runtime.Job, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "greet", Handler: func(ctx context.Context, j *runtime.Job) error {
		got <- j
		return nil
	}}))
	id, err := runtime.Insert(context.Background(), db.Pool, "greet", map[string]string{"to": "ana"}, nil)
	require.NoError(t, err)
	select {
	case j := <-got:
		require.Equal(t, id, j.ID)
		require.Equal(t, 1, j.Attempt)
		require.JSONEq(t, `{"to":"ana"}`, string(j.Payload))
		require.Equal(t, fmt.Sprintf("fila-job-%d", id), j.IdempotencyKey())
	case <-time.After(10 * time.Second):
		t.Fatal("job not picked up")
	}
	waitFor(t, 5*time.Second, "job completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
}

func TestPlainSQLInsertIsPickedUp(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	done := make(chan int64, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		done <- j.ID
		return nil
	}}))
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`INSERT INTO fila_jobs (kind, payload) VALUES ('k', '{"a":1}') RETURNING id`).Scan(&id))
	select {
	case got := <-done:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("plain SQL insert not picked up (the safety poll is 10 minutes, so only a notification can explain a pickup)")
	}
}

func TestInsertTxRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = runtime.InsertTx(ctx, tx, "k", nil, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n)

	// Committed: visible, and picked up.
	ran := make(chan int64, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { ran <- j.ID; return nil }}))
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	id, err := runtime.InsertTx(ctx, tx, "k", nil, nil)
	require.NoError(t, err)
	select {
	case <-ran:
		t.Fatal("job ran before its transaction committed")
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case got := <-ran:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("committed job not picked up")
	}
}

func TestInsertRefusesBadInput(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := runtime.Insert(ctx, db.Pool, "k", []byte(`{"a":`), nil)
	require.ErrorContains(t, err, "not valid JSON")
	_, err = runtime.Insert(ctx, db.Pool, "", nil, nil)
	require.ErrorContains(t, err, "kind is empty")
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "no spaces"})
	require.ErrorContains(t, err, "queue name")
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{MaxAttempts: -1})
	require.ErrorContains(t, err, "max attempts")
	_, err = runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{{Kind: "k"}, {Kind: "k", Payload: json.RawMessage("nope")}})
	require.ErrorContains(t, err, "job 1")
	// Nothing was inserted by any of them.
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n)
	// A plain SQL insert with a queue that cannot be a channel is refused by the table.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, queue) VALUES ('k', 'bad queue')`)
	require.ErrorContains(t, err, "fila_jobs_queue_valid")
}

func TestInsertManyOneStatement(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	jobs := make([]runtime.InsertParams, 5000)
	for i := range jobs {
		jobs[i] = runtime.InsertParams{Kind: "k", Payload: map[string]int{"i": i}, InsertOpts: runtime.InsertOpts{Priority: int16(i % 3)}}
	}
	// Count notifications: one statement must send one, not 5000. No worker
	// runs, so this listener says it sleeps, as any program of its own would.
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'test')`)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN fila_default")
	require.NoError(t, err)
	ids, err := runtime.InsertMany(ctx, db.Pool, jobs)
	require.NoError(t, err)
	require.Len(t, ids, 5000)
	for i := 1; i < len(ids); i++ {
		require.Greater(t, ids[i], ids[i-1])
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = conn.WaitForNotification(wctx)
	cancel()
	require.NoError(t, err)
	wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = conn.WaitForNotification(wctx)
	cancel()
	require.Error(t, err, "a second notification arrived for one statement")
}

func TestRetryBackoffThenDead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	var calls atomic.Int32
	start(t, baseConfig(t, db, runtime.Kind{Name: "flaky", Handler: func(ctx context.Context, j *runtime.Job) error {
		calls.Add(1)
		return fmt.Errorf("attempt %d failed", j.Attempt)
	}}))
	id, err := runtime.Insert(context.Background(), db.Pool, "flaky", nil, &runtime.InsertOpts{MaxAttempts: 3})
	require.NoError(t, err)
	// Retries are found by the next-run_at timer; the safety poll is 10 minutes.
	waitFor(t, 15*time.Second, "job dead after 3 attempts", func() bool { s, _, _ := jobState(t, db, id); return s == "dead" })
	state, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, "dead", state)
	require.Equal(t, 3, attempts)
	require.Equal(t, "attempt 3 failed", lastErr)
	require.EqualValues(t, 3, calls.Load())
	var gap float64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT extract(epoch FROM finished_at - created_at) FROM fila_jobs WHERE id = $1::bigint", id).Scan(&gap))
	// Two backoffs of at least RetryBase/2 and 2·RetryBase/2 separate the attempts.
	require.GreaterOrEqual(t, gap, 0.03)
}

func TestRetrySucceedsOnSecondAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		if j.Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	}}))
	id, err := runtime.Insert(context.Background(), db.Pool, "k", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "completed on retry", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	_, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, 2, attempts)
	require.Equal(t, "transient", lastErr, "the failed attempt's error is kept")
}

func TestPermanentPanicTimeoutUnknownKind(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "perm", Handler: func(ctx context.Context, j *runtime.Job) error {
			return runtime.Permanent(errors.New("card number invalid"))
		}},
		runtime.Kind{Name: "boom", Handler: func(ctx context.Context, j *runtime.Job) error { panic("kaboom") }},
		runtime.Kind{Name: "slow", Timeout: 100 * time.Millisecond, Handler: func(ctx context.Context, j *runtime.Job) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		runtime.Kind{Name: "decode", Handler: func(ctx context.Context, j *runtime.Job) error {
			var v struct{ N int }
			return j.Decode(&v)
		}},
	)
	start(t, cfg)
	ctx := context.Background()
	perm, _ := runtime.Insert(ctx, db.Pool, "perm", nil, nil)
	boom, _ := runtime.Insert(ctx, db.Pool, "boom", nil, &runtime.InsertOpts{MaxAttempts: 1})
	slow, _ := runtime.Insert(ctx, db.Pool, "slow", nil, &runtime.InsertOpts{MaxAttempts: 1})
	var decode int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('decode', '[1,2]') RETURNING id`).Scan(&decode))

	for _, id := range []int64{perm, boom, slow, decode} {
		waitFor(t, 10*time.Second, fmt.Sprintf("job %d dead", id), func() bool { s, _, _ := jobState(t, db, id); return s == "dead" })
	}
	_, attempts, le := jobState(t, db, perm)
	require.Equal(t, 1, attempts, "a permanent error is not retried")
	require.Equal(t, "card number invalid", le)
	_, _, le = jobState(t, db, boom)
	require.Contains(t, le, "handler panicked: kaboom")
	_, _, le = jobState(t, db, slow)
	require.Equal(t, "timed out after 100ms", le, "the timeout is said once")
	_, attempts, le = jobState(t, db, decode)
	require.Equal(t, 1, attempts)
	require.Contains(t, le, "does not decode")
}

func TestScheduledJobRunsOnTimeWithoutPolling(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ran := make(chan time.Time, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "later", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- time.Now()
		return nil
	}}))
	ctx := context.Background()
	var dbNow time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	// A job inserted before any claim, by plain SQL: no notification (it is
	// not runnable yet), so the worker must learn of it from its timer, which
	// it sets at its next claim: trigger one with another job.
	// Timed from before the insert: its run_at is the statement's now()
	// plus 1 s, and on a loaded machine the reply may come well after
	// that now().
	inserted := time.Now()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + interval '1 second')`)
	require.NoError(t, err)
	_, err = runtime.Insert(ctx, db.Pool, "other-kind-wakes-the-claimer", nil, &runtime.InsertOpts{Queue: "default", MaxAttempts: 1})
	require.NoError(t, err)
	select {
	case at := <-ran:
		took := at.Sub(inserted)
		require.GreaterOrEqual(t, took, 900*time.Millisecond, "ran before its run_at")
		require.Less(t, took, 5*time.Second, "the timer did not fire near run_at (safety poll is 10 minutes)")
	case <-time.After(10 * time.Second):
		t.Fatal("scheduled job never ran")
	}
}

func TestSixRuntimesRunEachJobExactlyOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE runs (job_id bigint NOT NULL, attempt int NOT NULL, worker int NOT NULL)`)
	require.NoError(t, err)
	const jobs = 5000
	params := make([]runtime.InsertParams, jobs)
	for i := range params {
		params[i] = runtime.InsertParams{Kind: "count"}
	}
	_, err = runtime.InsertMany(ctx, db.Pool, params)
	require.NoError(t, err)

	var mu sync.Mutex
	seen := map[int64]int{}
	stopSampling := sampleLockWaits(t, db)
	for w := 0; w < 6; w++ {
		w := w
		cfg := baseConfig(t, db, runtime.Kind{Name: "count", Handler: func(ctx context.Context, j *runtime.Job) error {
			mu.Lock()
			seen[j.ID]++
			mu.Unlock()
			_, err := db.Pool.Exec(ctx, "INSERT INTO runs VALUES ($1::bigint, $2::int, $3::int)", j.ID, j.Attempt, w)
			return err
		}})
		cfg.Concurrency = 8
		cfg.ClaimBatch = 50
		start(t, cfg)
	}
	waitFor(t, 120*time.Second, "all jobs completed", func() bool { return countState(t, db, "completed") == jobs })
	lockWaits := stopSampling()
	mu.Lock()
	require.Len(t, seen, jobs)
	for id, n := range seen {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}
	mu.Unlock()
	var dups, workers int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT job_id FROM runs GROUP BY job_id HAVING count(*) > 1) d`).Scan(&dups))
	require.Zero(t, dups)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT worker) FROM runs`).Scan(&workers))
	require.Greater(t, workers, 1, "the work was not shared")
	require.Zero(t, lockWaits, "a session waited on a row lock during the drain")
}

func TestGracefulStopFinishesRunningJobs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	started := make(chan struct{}, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "slow", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return nil
	}})
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	<-rt.Ready()
	id, err := runtime.Insert(context.Background(), db.Pool, "slow", nil, nil)
	require.NoError(t, err)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(ctx))
	require.NoError(t, <-errc)
	s, _, _ := jobState(t, db, id)
	require.Equal(t, "completed", s, "a handler within the deadline finishes and its result is written")
}

func TestStopBeforeRunIsNotLost(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ran := make(chan int64, 10)
	cfg := baseConfig(t, db, runtime.Kind{Name: "early", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.ID
		return nil
	}})
	id, err := runtime.Insert(context.Background(), db.Pool, "early", nil, nil)
	require.NoError(t, err)

	// A shutdown signal handled before Run began: Run returns at once and
	// claims nothing.
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	require.NoError(t, rt.Stop(context.Background()))
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept running after a Stop that came first")
	}
	select {
	case <-rt.Done():
	default:
		t.Fatal("Done is not closed after Run returned")
	}
	s, _, _ := jobState(t, db, id)
	require.Equal(t, "pending", s, "a runtime stopped before it ran claims nothing")
	require.ErrorIs(t, rt.Run(context.Background()), runtime.ErrClosed)

	// Stop racing Run's start, at every point of it: Run always returns.
	for i := range 20 {
		rt, err := runtime.New(cfg)
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() { errc <- rt.Run(context.Background()) }()
		time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, rt.Stop(ctx), "round %d", i)
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err, "round %d", i)
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: Run kept running after Stop (%d ms after it began)", i, i*5)
		}
	}
}

func TestHardStopReturnsUnfinishedJobs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	started := make(chan int64, 10)
	cfg := baseConfig(t, db, runtime.Kind{Name: "forever", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	}})
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	<-rt.Ready()
	ids, err := runtime.InsertMany(context.Background(), db.Pool, []runtime.InsertParams{{Kind: "forever"}, {Kind: "forever"}})
	require.NoError(t, err)
	<-started
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, rt.Stop(ctx), context.DeadlineExceeded)
	require.NoError(t, <-errc)
	for _, id := range ids {
		s, attempts, _ := jobState(t, db, id)
		require.Equal(t, "pending", s, "an interrupted job goes back to pending at once, not after its lease")
		require.Equal(t, 0, attempts, "an interrupted attempt is not counted")
		var history string
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT errors::text FROM fila_jobs WHERE id = $1::bigint", id).Scan(&history))
		require.Contains(t, history, "interrupted by worker shutdown")
	}
	var lease *time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT max(lease_until) FROM fila_jobs").Scan(&lease))
	require.Nil(t, lease)
}

func TestExpiredLeaseIsRescued(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	// A job whose worker died after it had heartbeated once: running, lease
	// already past. (Without that heartbeat, the attempt would be given back
	// as one no worker was seen to run: see claimer's tests.)
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, attempts, lease_until, started_at, heartbeat_at)
		VALUES ('k', 'running', 1, now() - interval '1 second', now() - interval '31 seconds', now() - interval '21 seconds') RETURNING id`).Scan(&id))
	ran := make(chan int, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.Attempt
		return nil
	}}))
	select {
	case attempt := <-ran:
		require.Equal(t, 2, attempt)
	case <-time.After(10 * time.Second):
		t.Fatal("expired job not rescued")
	}
	waitFor(t, 5*time.Second, "rescued job completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
}

func TestStaleWorkerCannotOverwrite(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var id int64
	var startedAt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, attempts, lease_until, started_at)
		VALUES ('k', 'running', 2, now() + interval '1 minute', now()) RETURNING id, started_at`).Scan(&id, &startedAt))
	// A worker that owned attempt 1 tries to complete it in a transaction.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	err = runtime.CompleteTx(ctx, tx, &runtime.Job{ID: id, Attempt: 1, StartedAt: startedAt})
	require.ErrorIs(t, err, runtime.ErrNotOwner)
	// So does a worker whose claim had the same attempt count, earlier.
	err = runtime.CompleteTx(ctx, tx, &runtime.Job{ID: id, Attempt: 2, StartedAt: startedAt.Add(-time.Second)})
	require.ErrorIs(t, err, runtime.ErrNotOwner)
	require.NoError(t, runtime.CompleteTx(ctx, tx, &runtime.Job{ID: id, Attempt: 2, StartedAt: startedAt}))
	require.NoError(t, tx.Commit(ctx))
	s, _, _ := jobState(t, db, id)
	require.Equal(t, "completed", s)
}

func TestCompleteInHandlerTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE effects (job_key text PRIMARY KEY)`)
	require.NoError(t, err)
	start(t, baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1::text)", j.IdempotencyKey()); err != nil {
				return err
			}
			return runtime.CompleteTx(ctx, tx, j)
		})
	}}))
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n))
	require.Equal(t, 1, n)
}

func TestPurePollMode(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ran := make(chan int64, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { ran <- j.ID; return nil }})
	cfg.Mode = runtime.ModePoll
	cfg.ListenDSN = ""
	cfg.PollMin, cfg.PollMax = 20*time.Millisecond, 200*time.Millisecond
	start(t, cfg)
	id, err := runtime.Insert(context.Background(), db.Pool, "k", nil, nil)
	require.NoError(t, err)
	select {
	case got := <-ran:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("poll mode did not pick the job up")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *runtime.Job) error { return nil }
	cases := map[string]runtime.Config{
		"DSN is empty":   {Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
		"Kinds is empty": {DSN: "postgres://x"},
		"Concurrency":    {DSN: "postgres://x", Concurrency: -1, Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
		"Lease":          {DSN: "postgres://x", Lease: time.Millisecond, Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
		"Queues":         {DSN: "postgres://x", Queues: []string{"a b"}, Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
		"SafetyPoll":     {DSN: "postgres://x", SafetyPoll: time.Hour, Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
		"Mode":           {DSN: "postgres://x", Mode: "smoke", Kinds: []runtime.Kind{{Name: "k", Handler: h}}},
	}
	for want, cfg := range cases {
		_, err := runtime.New(cfg)
		require.ErrorContains(t, err, want)
	}
}

func TestRefusesUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	db := testdbNew(t)
	rt, err := runtime.New(runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN,
		Kinds: []runtime.Kind{{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}}})
	require.NoError(t, err)
	err = rt.Run(context.Background())
	require.ErrorContains(t, err, "fila migrate")
}

func TestHeartbeatsKeepALongJobFromBeingRescued(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	var runs atomic.Int32
	kind := runtime.Kind{Name: "long", Handler: func(ctx context.Context, j *runtime.Job) error {
		runs.Add(1)
		select {
		case <-time.After(3 * time.Second): // three leases long
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}}
	for i := 0; i < 2; i++ { // a second worker that would take the job if its lease expired
		cfg := baseConfig(t, db, kind)
		cfg.Lease = time.Second
		cfg.SafetyPoll, cfg.UnhealthyPoll = time.Second, 100*time.Millisecond
		start(t, cfg)
	}
	id, err := runtime.Insert(context.Background(), db.Pool, "long", nil, nil)
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "long job completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	_, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, 1, attempts, "never rescued while its worker heartbeats")
	require.Empty(t, lastErr)
	require.EqualValues(t, 1, runs.Load())
}

// A handler's panic reaches every middleware as the attempt's error, with
// its stack, as any other failure does: a middleware that records next's
// error (an error reporter, metrics, a span) sees it. The job is retried
// with the same error, and WorkTx treats it the same way.
func TestPanicReachesMiddlewareAsAnError(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seen := make(chan error, 4)
	record := func(next runtime.Handler) runtime.Handler {
		return func(ctx context.Context, j *runtime.Job) error {
			err := next(ctx, j)
			seen <- err
			return err
		}
	}
	boom := runtime.Kind{Name: "boom", Handler: func(ctx context.Context, j *runtime.Job) error { panic("kaboom") }}
	cfg := baseConfig(t, db, boom)
	cfg.Middleware = []runtime.Middleware{record}
	start(t, cfg)
	id, err := runtime.Insert(context.Background(), db.Pool, "boom", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	select {
	case err := <-seen:
		require.Error(t, err, "the middleware saw the panic as an error")
		require.Contains(t, err.Error(), "handler panicked: kaboom")
		require.Contains(t, err.Error(), "goroutine", "with the stack")
	case <-time.After(30 * time.Second):
		t.Fatal("the middleware never saw the attempt")
	}
	waitFor(t, 10*time.Second, "dead", func() bool { s, _, _ := jobState(t, db, id); return s == "dead" })
	_, _, le := jobState(t, db, id)
	require.Contains(t, le, "handler panicked: kaboom")

	// The same through WorkTx, inside a transaction of the test's.
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	id2, err := runtime.InsertTx(ctx, tx, "boom", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	_, _ = runtime.WorkTx(ctx, tx, boom, []runtime.Middleware{record}, id2)
	select {
	case err := <-seen:
		require.ErrorContains(t, err, "handler panicked: kaboom")
	default:
		t.Fatal("WorkTx's middleware never saw the attempt")
	}
}
