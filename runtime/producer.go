package runtime

import (
	"context"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/listener"
)

// claimTimeoutDefault bounds one claim statement, which is not cancelled
// by a stop (Runtime.claimTimeout; tests of what follows a timeout lower it).
const claimTimeoutDefault = 30 * time.Second

// producer claims the jobs of one queue, within the queue's own concurrency
// (and the runtime's MaxConcurrency when set), whenever there may be work:
// woken by the wake source, by its poller's safety poll or due timer, or by a
// handler of its own finishing while work was left.
type producer struct {
	rt     *Runtime
	queue  string
	limit  int
	poller *fallbackpoll.Poller
	log    *zap.Logger

	running atomic.Int32
	freed   chan struct{} // a handler of this queue returned; capacity 1

	// claimBuf holds the records of the last claim's jobs, which
	// dispatchClaimed copies; only run claims with it.
	claimBuf claimer.ClaimBuffer

	// Handlers run on long-lived executor goroutines that take claimed
	// attempts from runq (see runQueue) rather than on one goroutine per
	// job: a goroutine per job cost its creation, a fresh stack grown by
	// copying, and its freeing, a large part of the Go CPU of a drain.
	runq runQueue

	// Set by start, before the producer's goroutines run. RemoveQueue
	// stops claiming (stopClaiming), waits for the claim loop to return
	// (claimingDone), then for the queue's handlers (handlers), cancelling
	// them at its deadline, as Stop does for every queue.
	stopClaiming context.CancelFunc
	claimingDone chan struct{}
	handlers     sync.WaitGroup

	// Used by run's goroutine only.
	quiet    *quiet      // ModeNotify's sleeping and polling; nil in the other modes
	wal      walRecheck  // ModeWAL's rechecks
	busyPoll *time.Timer // the next poll while not asleep; in ModeWAL, the next recheck
	// hint is the job the last notification named (listener.Hinter), taken
	// when the wake source woke this producer and used by its next claim.
	hint int64
	// batchCap is the most jobs one claim takes: Config.ClaimBatch, halved
	// after each claim that ran out of time (down to one job) and doubled
	// back after claimsBeforeGrow claims in a row that did not. batchCap is
	// read by Stats; the rest by run's goroutine only.
	batchCap   atomic.Int32
	goodClaims int
}

// claimsBeforeGrow is how many claims in a row must finish in time before a
// claim cut short by timeouts takes twice as many jobs again.
const claimsBeforeGrow = 20

func newProducer(rt *Runtime, queue string, limit int) (*producer, error) {
	poller, err := fallbackpoll.New(rt.cfg.pollConfig(queue))
	if err != nil {
		return nil, err
	}
	p := &producer{rt: rt, queue: queue, limit: limit, poller: poller,
		log: rt.log.With(zap.String("queue", queue)), freed: make(chan struct{}, 1), claimingDone: make(chan struct{})}
	p.runq.init()
	if rt.cfg.Mode == ModeNotify {
		p.quiet = newQuiet(rt.cfg.BusyRate)
	}
	p.batchCap.Store(int32(rt.cfg.ClaimBatch))
	return p, nil
}

// claimRanOutOfTime halves the claim's batch after a claim that timed out
// (the database too slow for that many rows in one statement, or a
// statement timeout Fila could not set aside): the same claim sent again
// would time out again, and no job would ever run.
func (p *producer) claimRanOutOfTime(ctx context.Context, err error) {
	p.goodClaims = 0
	old := int(p.batchCap.Load())
	if old <= 1 {
		return
	}
	p.batchCap.Store(int32(old / 2))
	p.log.Warn("claim ran out of time; claiming fewer jobs per statement", zap.Int("claim_batch", old/2),
		zap.Int("was", old), zap.Error(err))
	p.rt.registry.update(ctx, p.rt.wakeState())
}

// claimInTime counts a claim that finished in time, and doubles a batch cut
// by timeouts back after claimsBeforeGrow of them.
func (p *producer) claimInTime(ctx context.Context) {
	old := int(p.batchCap.Load())
	if old >= p.rt.cfg.ClaimBatch {
		return
	}
	if p.goodClaims++; p.goodClaims < claimsBeforeGrow {
		return
	}
	p.goodClaims = 0
	p.batchCap.Store(int32(min(2*old, p.rt.cfg.ClaimBatch)))
	p.log.Info("claims finish in time again; claiming more jobs per statement", zap.Int("claim_batch", int(p.batchCap.Load())))
	p.rt.registry.update(ctx, p.rt.wakeState())
}

// start runs the producer's poller and claim loop, through spawn, until ctx
// ends or stopClaiming is called; claimedOnce is called after the first
// claim (or when the loop returns before it).
func (p *producer) start(ctx context.Context, spawn func(func() error), claimedOnce func()) {
	pctx, stop := context.WithCancel(ctx)
	p.stopClaiming = stop
	spawn(func() error { return p.poller.Run(pctx) })
	spawn(func() error {
		defer close(p.claimingDone)
		defer claimedOnce()
		defer p.stopExecutors()
		return p.run(pctx, claimedOnce)
	})
}

// run claims until ctx ends. claimedOnce is called after the first claim.
func (p *producer) run(ctx context.Context, claimedOnce func()) error {
	var wakes <-chan struct{}
	sourceReason := WakeNotify
	if p.rt.source != nil {
		wakes = p.rt.source.WakesFor(p.queue)
		if p.rt.cfg.Mode == ModeWAL {
			sourceReason = WakeWAL
		}
	}
	obs := p.rt.cfg.Observer
	reason := WakePoll // the first claim, at start
	errBackoff := backoff.NewExponentialBackOff()
	errBackoff.InitialInterval = 100 * time.Millisecond
	errBackoff.MaxInterval = 5 * time.Second
	errBackoff.MaxElapsedTime = 0
	errBackoff.Reset() // the constructor started from its own 500 ms; start from InitialInterval
	p.busyPoll = time.NewTimer(time.Hour)
	p.busyPoll.Stop()
	defer p.busyPoll.Stop()
	hinter, _ := p.rt.source.(listener.Hinter)
	defer p.forgetSleep()
	// A claim of one job per freed slot would cost a statement per job under
	// load; once busy, wait until a tenth of the slots are free.
	threshold := max(1, p.limit/10)
	first := true
	dirty := true
	recheck := false // this claim is a WAL recheck (see recheckWAL)
	for {
		if ctx.Err() != nil {
			// Stopped (or removed) before a claim: none is sent.
			return nil
		}
		if dirty {
			running := int(p.running.Load())
			if free := p.limit - running; free > 0 && (free >= threshold || running == 0) {
				obs.Woken(p.queue, reason)
				found, more, err := p.claim(ctx, free)
				switch {
				case ctx.Err() != nil:
					return nil
				case err != nil:
					if claimer.IsTimeout(err) {
						p.claimRanOutOfTime(ctx, err)
					}
					wait := errBackoff.NextBackOff()
					p.log.Error("claim failed; will retry", zap.Duration("retry_in", wait), zap.Error(err))
					dirty = true
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return nil
					}
				default:
					errBackoff.Reset()
					p.claimInTime(ctx)
					dirty = more
					if p.quiet != nil {
						dirty = p.settle(ctx, found, more, reason == WakeNotify) || dirty
					}
					if p.rt.cfg.Mode == ModeWAL {
						p.recheckWAL(found > 0 || more, reason == WakeWAL, recheck)
					}
				}
				recheck = false
				if first {
					first = false
					claimedOnce()
				}
				// Claiming again at once means work was left, which a handler
				// finishing (or the claim itself) revealed.
				reason = WakeSlot
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wakes:
			dirty, reason = true, sourceReason
			if hinter != nil {
				p.hint = hinter.TakeHint(p.queue)
			}
		case why := <-p.poller.Wakes():
			dirty, reason = true, WakePoll
			if why == fallbackpoll.ReasonDue {
				reason = WakeTimer
			}
		case <-p.busyPoll.C:
			dirty, reason = true, WakePoll
			recheck = p.rt.cfg.Mode == ModeWAL
		case <-p.freed:
			reason = WakeSlot
		}
	}
}

// walRechecks are the delays of the claims that follow a WAL wake whose
// claim found nothing. The WAL stream can deliver a transaction's commit
// before the committing backend has made it visible to other snapshots
// (PostgreSQL flushes the commit record, then updates its list of running
// transactions), so a claim that follows the wake at once may not see the
// job, and no other wake would come for it: seen in a test run under the
// race detector, where the job waited for the safety poll. A notification
// is delivered only once its transaction is visible, so ModeNotify needs
// none.
var walRechecks = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond}

// recheckWAL arms, in ModeWAL, the claims of walRechecks after a claim
// (see walRecheck).
func (p *producer) recheckWAL(foundWork, byWAL, recheck bool) {
	switch d, stop := p.wal.claimed(foundWork, byWAL, recheck); {
	case stop:
		p.busyPoll.Stop()
	case d > 0:
		p.busyPoll.Reset(d)
	}
}

// settle decides, after a claim in ModeNotify, between sleeping and
// polling (see quiet), runs the statement that decision needs, and reports
// whether to claim again at once.
func (p *producer) settle(ctx context.Context, found int, more, byNotify bool) (claimNow bool) {
	store, worker := p.rt.store, p.rt.registry.id
	step := p.quiet.claimed(time.Now(), found, more, byNotify)
	if step.wake {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := store.Wake(cctx, p.queue, worker)
		cancel()
		if err != nil {
			p.log.Warn("cannot stop sleeping; notifications keep coming", zap.Error(err))
		} else {
			p.log.Debug("polling: jobs come faster than notifications are worth", zap.Int("jobs_per_second", p.quiet.windowJobs))
		}
		step = p.quiet.woke(err == nil)
	}
	if step.sleep {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		slept, err := store.Sleep(cctx, p.queue, worker)
		cancel()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("cannot sleep; polling on", zap.Error(err))
		}
		if err == nil && slept {
			p.log.Debug("sleeping: waiting for notifications")
		}
		step = p.quiet.slept(time.Now(), err == nil && slept)
	}
	switch {
	case step.stopPoll:
		p.busyPoll.Stop()
	case step.poll > 0:
		p.busyPoll.Reset(step.poll)
	}
	return step.claimNow
}

// forgetSleep deletes this worker's sleeping row of the queue when the
// producer stops (the registry deletes the rest at a clean stop).
func (p *producer) forgetSleep() {
	if p.quiet == nil || !p.quiet.asleep {
		return
	}
	ctx, cancel := context.WithTimeout(p.rt.lastCtx, 5*time.Second)
	defer cancel()
	if err := p.rt.store.Wake(ctx, p.queue, p.rt.registry.id); err != nil {
		p.log.Debug("cannot delete the sleeping row", zap.Error(err))
	}
	p.quiet.asleep = false
}

// claim claims up to free jobs (fewer if the batch or the runtime's total
// caps it) and dispatches them; it reports how many it found and whether
// there may be more work right now.
func (p *producer) claim(ctx context.Context, free int) (found int, more bool, err error) {
	rt := p.rt
	want := min(free, int(p.batchCap.Load()))
	n := want
	if rt.total != nil {
		// Queues wait for the shared total in turn (the semaphore is FIFO):
		// one slot blocking, then as many more as are free and not awaited.
		if err := rt.total.Acquire(ctx, 1); err != nil {
			return 0, false, nil
		}
		n = 1
		for n < want && rt.total.TryAcquire(1) {
			n++
		}
	}
	// A claim that reached the server may commit even if the client gives
	// up on it: stopping must not cancel it halfway, or its jobs would sit
	// running, owned by nobody, until their leases expire. Its jobs are
	// dispatched even when stopping; the drain runs them or a hard stop
	// returns them at once. Only a database that does not answer by the
	// end of the stop's grace cuts it short (their attempts, never seen
	// running, are then given back by the rescue).
	cctx, cancel := context.WithTimeout(rt.lastCtx, rt.claimTimeout)
	defer cancel()
	hint := p.hint
	p.hint = 0
	if hint > 0 && p.quiet != nil && p.quiet.asleep && len(rt.idKinds) > 0 {
		// Asleep, this worker found the queue empty, and one notification
		// since names the job that came: claim it by its id, then read the
		// queue's head for anything else (more), as a claim that filled
		// every slot does. The head's read rescues expired leases and sets
		// the due timer; it costs a statement after the pickup instead of
		// before it.
		//
		// sent is taken before the statement is sent: the lease the database
		// grants starts after it, so a deadline counted from it is never
		// late.
		sent := time.Now()
		cj, err := rt.store.ClaimID(cctx, hint, p.queue, rt.idKinds, rt.cfg.Lease)
		if err != nil {
			p.log.Warn("claim by id failed; claiming from the queue's head", zap.Int64("job_id", hint), zap.Error(err))
		}
		if cj != nil {
			if rt.total != nil && n > 1 {
				rt.total.Release(int64(n - 1))
			}
			rt.claimedByID.Add(1)
			p.dispatchClaimed(&claimer.ClaimResult{Jobs: []*claimer.Job{cj}}, sent)
			// The handler's goroutine is next on this thread: let it start
			// before this one reads the queue's head, rather than after that
			// claim is sent or another thread takes it over (0.10 ms at the
			// median at 10 jobs/s, the step from the claim's reply to the
			// handler's first line).
			goruntime.Gosched()
			return 1, true, nil
		}
	}
	sent := time.Now() // as for the claim by id
	// The claim's jobs are copied by dispatchClaimed: the buffer is reused.
	res, err := rt.store.ClaimRatedInto(cctx, &p.claimBuf, p.queue, rt.kindNames, rt.limits, rt.rates, n, rt.cfg.Lease)
	if err != nil {
		if rt.total != nil {
			rt.total.Release(int64(n))
		}
		return 0, true, err
	}
	if rt.total != nil && len(res.Jobs) < n {
		rt.total.Release(int64(n - len(res.Jobs)))
	}
	if res.Rescued > 0 {
		p.log.Warn("rescued jobs whose lease expired", zap.Int("jobs", res.Rescued))
	}
	p.dispatchClaimed(&res, sent)
	more = len(res.Jobs) == n || res.Rescued > 0
	// Only ever move the timer earlier: a retry written while this claim was
	// on the wire set a due time the claim's snapshot could not see, and
	// must not be cleared. A due time that turns out stale costs one claim.
	if !more && res.HasNextDue {
		p.poller.DueWithin(res.NextDue)
	}
	return len(res.Jobs), more, nil
}

// dispatchClaimed reports a claim's jobs and runs them. sent is when the
// claim statement was sent.
func (p *producer) dispatchClaimed(res *claimer.ClaimResult, sent time.Time) {
	jobs := make([]*Job, len(res.Jobs))
	var block []Job
	for i, cj := range res.Jobs {
		if len(block) == 0 {
			block = make([]Job, min(jobBlock, len(res.Jobs)-i))
		}
		jobs[i] = &block[0]
		block = block[1:]
		jobs[i].fill(cj)
	}
	p.rt.cfg.Observer.Claimed(p.queue, jobs, res.Rescued)
	for _, j := range jobs {
		p.dispatch(j, sent)
	}
	p.poller.Claimed(len(res.Jobs))
	if p.rt.cfg.Mode == ModePoll && len(res.Jobs) > 0 {
		// Work flows: poll at PollMin again, as this queue's own poll did.
		p.rt.sweeper.poller.Claimed(len(res.Jobs))
	}
}

// dispatch hands one claimed attempt to the completer, which owns it from
// now on, and runs it.
func (p *producer) dispatch(job *Job, sent time.Time) {
	rt := p.rt
	p.running.Add(1)
	rt.claimed.Add(1)
	rt.handlers.Add(1)
	p.handlers.Add(1)
	job.ctx.values = rt.jobValues
	rt.completer.own(job.attempt(), job, sent)
	if rt.workCtx.Err() != nil {
		// Work was cancelled before the completer owned it: its cancelAll
		// did not see this one.
		job.ctx.stop(context.Cause(rt.workCtx))
	}
	p.runq.push(p, job)
}

// execute runs one attempt's handler on an executor.
func (p *producer) execute(job *Job) {
	defer p.rt.handlers.Done()
	defer p.handlers.Done()
	p.rt.execute(job)
}

// stopExecutors lets executors end once the producer claims no more (run
// has returned: nothing is queued any more) and the queue is empty.
func (p *producer) stopExecutors() { p.runq.close() }

// release frees the handler slot of an attempt whose handler returned (its
// outcome may not be durable yet: the completer still owns the attempt).
func (p *producer) release() {
	p.running.Add(-1)
	if p.rt.total != nil {
		p.rt.total.Release(1)
	}
	select {
	case p.freed <- struct{}{}:
	default:
	}
}
