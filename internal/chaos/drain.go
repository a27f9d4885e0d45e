package chaos

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// drainSpec describes a drain of many jobs by several in-process runtimes,
// with a fault injected part-way.
type drainSpec struct {
	jobs, workers, concurrency int
	lease                      time.Duration
	// inTx: each handler records its effect and completes its job in one
	// transaction (runtime.CompleteTx), so the effect happens exactly once
	// even when a commit's answer is lost. Otherwise the handler records its
	// effect on its own and the runtime writes the completion.
	inTx bool
	// mainDSN and listenDSN of every runtime.
	mainDSN, listenDSN string
	// faultAt is the share of jobs that have run when fault is called.
	faultAt float64
	// fault injects the fault and returns once the faulty part is back
	// (the server accepts connections again). nil: no fault.
	fault func(ctx context.Context) error
	// sampleLocks samples pg_stat_activity for row-lock waits.
	sampleLocks bool
	// claimBatch is each runtime's ClaimBatch; 0 means 50.
	claimBatch int
}

// drainOutcome is what a drain measured.
type drainOutcome struct {
	counts       tableCounts
	overlapping  []int64
	worstOverlap time.Duration
	okTwice      []int64
	faultStart   time.Time
	faultEnd     time.Time     // when the fault function returned
	recovery     time.Duration // fault start to the first effect after faultEnd
	drainTook    time.Duration
	doneBefore   int      // jobs run before the fault
	perWorker    []uint64 // jobs each runtime completed after the fault
	// claimedAfter is, per runtime, whether a claim statement of its
	// succeeded after the fault was over: it recovered on its own, whether
	// or not jobs were left for it by then.
	claimedAfter  []bool
	lockWaits     []lockWait
	runtimeErrors []error
	unfinished    []string
}

// drainDeadline bounds a drain of n jobs, generously: a drain that has not
// finished by then has lost jobs.
func drainDeadline(n int) time.Duration { return time.Minute + time.Duration(n)*10*time.Millisecond }

func (e *Env) drain(ctx context.Context, db *database, spec drainSpec) (*drainOutcome, error) {
	out := &drainOutcome{}
	if _, err := db.pool.Exec(ctx, runsTableSQL); err != nil {
		return nil, err
	}
	e.progress("inserting %d jobs", spec.jobs)
	for left := spec.jobs; left > 0; {
		n := min(left, 10000)
		params := make([]runtime.InsertParams, n)
		for i := range params {
			params[i] = runtime.InsertParams{Kind: "record", InsertOpts: runtime.InsertOpts{MaxAttempts: 25}}
		}
		if _, err := runtime.InsertMany(ctx, db.pool, params); err != nil {
			return nil, err
		}
		left -= n
	}

	log := newRunLog()
	type worker struct {
		rt      *runtime.Runtime
		pool    *pgxpool.Pool
		errc    chan error
		claimed *claimClock
	}
	workers := make([]*worker, spec.workers)
	// stopAll stops every runtime still running; it may be called again.
	stopAll := func() {
		for i, w := range workers {
			if w == nil {
				continue
			}
			workers[i] = nil
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = w.rt.Stop(sctx)
			cancel()
			if err := <-w.errc; err != nil {
				out.runtimeErrors = append(out.runtimeErrors, err)
			}
			w.pool.Close()
		}
	}
	for i := range workers {
		// The handlers' own pool: their effects go the same way as the
		// runtime's statements (through the pooler when there is one).
		pc, err := pgconfig.Pool(spec.mainDSN)
		if err != nil {
			stopAll()
			return nil, err
		}
		// At most 8: a thousand handler slots must not open a thousand
		// connections. The throwaway server allows 97 (max_connections
		// 100, 3 kept for superusers): six workers of 8 handler
		// connections, the runtime's own few and a listener each fit; at
		// 32, handlers slowed by a loaded machine took every slot, and a
		// worker's listener could not connect to become ready.
		pc.MaxConns = int32(min(spec.concurrency, 8))
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			stopAll()
			return nil, err
		}
		handler := func(ctx context.Context, j *runtime.Job) error {
			r := log.begin(j.ID, j.Attempt, i)
			start := time.Now()
			var err error
			if spec.inTx {
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insertRunSQL, j.ID, j.Attempt, i, start); err != nil {
						return err
					}
					return runtime.CompleteTx(ctx, tx, j)
				})
			} else {
				_, err = pool.Exec(ctx, insertRunSQL, j.ID, j.Attempt, i, start)
			}
			log.end(r, err == nil)
			return err
		}
		claimed := &claimClock{}
		rt, err := runtime.New(runtime.Config{
			Observer: claimed,
			DSN:      spec.mainDSN, ListenDSN: spec.listenDSN,
			Kinds:       []runtime.Kind{{Name: "record", Handler: handler}},
			Concurrency: spec.concurrency, Lease: spec.lease, ClaimBatch: cmp.Or(spec.claimBatch, 50),
			RetryBase: 50 * time.Millisecond, RetryMax: time.Second,
			SafetyPoll: 30 * time.Second,
			Logger:     e.logger().Named(fmt.Sprintf("worker%d", i)),
		})
		if err != nil {
			pool.Close()
			stopAll()
			return nil, err
		}
		w := &worker{rt: rt, pool: pool, errc: make(chan error, 1), claimed: claimed}
		workers[i] = w
		go func() { w.errc <- rt.Run(context.WithoutCancel(ctx)) }()
	}
	defer stopAll()
	for i, w := range workers {
		select {
		case <-w.rt.Ready():
		case err := <-w.errc:
			w.errc <- err
			return nil, fmt.Errorf("worker %d stopped before it was ready: %w", i, err)
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("worker %d not ready after 30s", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	var sampler *lockSampler
	if spec.sampleLocks {
		sampler = startLockSampler(db)
	}
	started := time.Now()
	e.progress("draining with %d runtimes × %d handlers", spec.workers, spec.concurrency)
	deadline := time.After(drainDeadline(spec.jobs))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	lastReport, lastCount := time.Now(), time.Now()
	faulted := spec.fault == nil
	var faultErr chan error
	var before []uint64
wait:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			break wait
		case err := <-faultErr:
			faultErr = nil
			out.faultEnd = time.Now()
			if err != nil {
				return nil, fmt.Errorf("inject the fault: %w", err)
			}
			e.progress("fault over after %.2fs; waiting for the workers to recover", out.faultEnd.Sub(out.faultStart).Seconds())
		case <-tick.C:
		}
		done, last := log.progress()
		if !faulted && float64(done) >= spec.faultAt*float64(spec.jobs) {
			faulted = true
			out.doneBefore = done
			for _, w := range workers {
				before = append(before, w.rt.Stats().Completed)
			}
			out.faultStart = time.Now()
			e.progress("%d of %d jobs ran; injecting the fault", done, spec.jobs)
			faultErr = make(chan error, 1)
			go func() { faultErr <- spec.fault(ctx) }()
		}
		if out.recovery == 0 && !out.faultEnd.IsZero() && last.After(out.faultEnd) {
			out.recovery = last.Sub(out.faultStart)
			e.progress("jobs run again %.2fs after the fault began", out.recovery.Seconds())
		}
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			e.progress("%d of %d jobs ran", done, spec.jobs)
		}
		// The table decides when the drain is over: a handler may have
		// failed to hear that its commit went through, and the completions
		// of the last jobs may still be on their way.
		if faulted && faultErr == nil && done >= spec.jobs*9/10 && time.Since(lastCount) > 250*time.Millisecond {
			lastCount = time.Now()
			c, err := countJobs(ctx, db.pool, false)
			if err == nil && c.completed+c.dead == c.jobs {
				break
			}
		}
	}
	out.drainTook = time.Since(started)
	if !out.faultEnd.IsZero() {
		// The others may have run every job left before a runtime's claim
		// came out of its error backoff (at most 5 s): give each the time
		// to make one.
		wait := time.Now().Add(15 * time.Second)
		for {
			out.claimedAfter = out.claimedAfter[:0]
			all := true
			for _, w := range workers {
				ok := w.claimed.last().After(out.faultEnd)
				out.claimedAfter = append(out.claimedAfter, ok)
				all = all && ok
			}
			if all || time.Now().After(wait) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if sampler != nil {
		out.lockWaits = sampler.stop()
	}
	for i, w := range workers {
		if before != nil {
			out.perWorker = append(out.perWorker, w.rt.Stats().Completed-before[i])
		}
		select {
		case err := <-w.errc:
			w.errc <- err
			out.runtimeErrors = append(out.runtimeErrors, fmt.Errorf("worker %d stopped during the drain: %w", i, err))
		default:
		}
	}
	stopAll()

	runs := log.snapshot()
	out.overlapping, out.worstOverlap = overlapStats(runs, time.Now())
	out.okTwice = okTwice(runs)
	var err error
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		out.counts, err = countJobs(cctx, db.pool, true)
		if err == nil || attempt == 20 {
			break
		}
		time.Sleep(250 * time.Millisecond) // the server may be coming back
	}
	if err != nil {
		return nil, fmt.Errorf("count the jobs: %w", err)
	}
	if out.counts.completed < out.counts.jobs {
		out.unfinished = unfinished(cctx, db)
	}
	return out, nil
}

// unfinished describes a few jobs that did not complete, for the report.
func unfinished(ctx context.Context, db *database) []string {
	rows, err := db.pool.Query(ctx, `SELECT format('job %s: %s, attempt %s/%s, run_at %s, lease_until %s, now %s, last_error %s',
		id, state, attempts, max_attempts, run_at, lease_until, now(), left(last_error, 200))
		FROM fila_jobs WHERE state <> 'completed' ORDER BY id LIMIT 5`)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if rows.Scan(&s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// judge turns a drain's outcome into the result's figures and checks.
func (o *drainOutcome) judge(res *Result, jobs int, exactlyOnce bool) {
	c := o.counts
	res.Lost = jobs - c.completed
	res.Duplicated = len(c.jobsTwice)
	res.Overlapping, res.WorstOverlap = len(o.overlapping), o.worstOverlap
	res.Recovery = o.recovery
	res.check(c.jobs == jobs, "the table holds %d jobs, %d were inserted", c.jobs, jobs)
	res.check(res.Lost == 0, "%d jobs did not complete (dead %d, pending %d, running %d)", res.Lost, c.dead, c.pending, c.running)
	res.check(res.Overlapping == 0, "jobs run twice at the same time: %s", ids(o.overlapping, 10))
	if exactlyOnce {
		res.check(res.Duplicated == 0, "jobs whose effect was recorded twice: %s", ids(c.jobsTwice, 10))
		res.check(c.runsRows == jobs, "%d effects recorded for %d jobs", c.runsRows, jobs)
	}
	res.check(c.jobsWithoutRun == 0, "%d jobs completed without their effect", c.jobsWithoutRun)
	res.check(c.liveLeases == 0, "%d jobs left running with a live lease", c.liveLeases)
	for _, u := range o.unfinished {
		res.note("not completed: %s", u)
	}
	for _, err := range o.runtimeErrors {
		res.check(false, "a runtime failed: %v", err)
	}
	res.note("drain took %.1fs (%.0f jobs/s)", o.drainTook.Seconds(), float64(jobs)/o.drainTook.Seconds())
	if !o.faultStart.IsZero() {
		res.note("fault injected after %d jobs; server back after %.2fs; jobs ran again %.2fs after the fault began",
			o.doneBefore, o.faultEnd.Sub(o.faultStart).Seconds(), o.recovery.Seconds())
		res.check(o.recovery > 0, "no job ran after the fault ended")
		res.note("jobs each runtime completed after the fault: %v", o.perWorker)
	}
	if len(o.okTwice) > 0 {
		res.note("handlers that returned success twice for one job: %d (%s)", len(o.okTwice), ids(o.okTwice, 5))
	}
}

// claimClock is a runtime.Observer that keeps the time of the runtime's
// last successful claim statement, empty or not.
type claimClock struct{ at atomic.Int64 }

func (c *claimClock) Woken(string, runtime.WakeReason) {}
func (c *claimClock) Claimed(string, []*runtime.Job, int) {
	c.at.Store(time.Now().UnixNano())
}
func (c *claimClock) Finished(*runtime.Job, runtime.Outcome, time.Duration) {}

func (c *claimClock) last() time.Time { return time.Unix(0, c.at.Load()) }
