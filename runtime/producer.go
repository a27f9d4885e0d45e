package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/listener"
)

// claimTimeout bounds one claim statement, which is not cancelled by a stop.
const claimTimeout = 30 * time.Second

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

	// ModeNotify's sleeping and polling, used by run's goroutine only.
	quiet       bool        // the mode in which producers notify only sleepers
	asleep      bool        // this worker's row in fila_sleepers exists
	busyPoll    *time.Timer // the next poll while not asleep; in ModeWAL, the next recheck
	rechecks    int         // ModeWAL: rechecks armed since the last WAL wake's empty claim
	pollEvery   time.Duration
	empties     int // empty claims in a row while polling
	windowStart time.Time
	windowJobs  int // jobs claimed on notifications in the second since windowStart
	// hint is the job the last notification named (listener.Hinter), taken
	// when the wake source woke this producer and used by its next claim.
	hint int64
}

func newProducer(rt *Runtime, queue string) (*producer, error) {
	poller, err := fallbackpoll.New(rt.cfg.pollConfig(queue))
	if err != nil {
		return nil, err
	}
	return &producer{rt: rt, queue: queue, limit: rt.cfg.concurrency(queue), poller: poller,
		log: rt.log.With(zap.String("queue", queue)), freed: make(chan struct{}, 1),
		quiet: rt.cfg.Mode == ModeNotify, pollEvery: busyPollMin}, nil
}

// Sleeping and polling in ModeNotify (see migration 0005): producers
// notify a queue only while some worker sleeps on it. A producer sleeps
// (waits for notifications) while jobs come slowly; when the claims that
// notifications woke take more than Config.BusyRate jobs a second (the
// notifications themselves are coalesced), it stops sleeping, so producers
// stop paying for NOTIFY, and polls instead: busyPollMin after a claim that
// found jobs, doubling up to busyPollMax after empty ones, and after
// busyEmptyPolls empty claims in a row it tries to sleep again.
const (
	busyPollMin    = time.Millisecond
	busyPollMax    = 100 * time.Millisecond
	busyEmptyPolls = 6
)

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
	p.empties = busyEmptyPolls // try to sleep after the first empty claim
	defer p.forgetSleep()
	// A claim of one job per freed slot would cost a statement per job under
	// load; once busy, wait until a tenth of the slots are free.
	threshold := max(1, p.limit/10)
	first := true
	dirty := true
	recheck := false // this claim is a WAL recheck (see recheckWAL)
	for {
		if dirty {
			running := int(p.running.Load())
			if free := p.limit - running; free > 0 && (free >= threshold || running == 0) {
				obs.Woken(p.queue, reason)
				found, more, err := p.claim(ctx, free)
				switch {
				case ctx.Err() != nil:
					return nil
				case err != nil:
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
					dirty = more
					if p.quiet {
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

// recheckWAL arms, in ModeWAL, the claims of walRechecks after a claim:
// foundWork, none; an empty claim woken by the WAL, the first; an empty
// recheck, the next, if any.
func (p *producer) recheckWAL(foundWork, byWAL, recheck bool) {
	switch {
	case foundWork:
		p.rechecks = 0
		p.busyPoll.Stop()
	case byWAL:
		p.rechecks = 1
		p.busyPoll.Reset(walRechecks[0])
	case recheck && p.rechecks < len(walRechecks):
		p.busyPoll.Reset(walRechecks[p.rechecks])
		p.rechecks++
	case recheck:
		p.rechecks = 0
	}
}

// settle decides, after a claim in ModeNotify, between sleeping and
// polling, and reports whether to claim again at once.
func (p *producer) settle(ctx context.Context, found int, more, byNotify bool) (claimNow bool) {
	store, worker := p.rt.store, p.rt.registry.id
	if p.asleep {
		if !byNotify {
			return false
		}
		now := time.Now()
		if now.Sub(p.windowStart) > time.Second {
			p.windowStart, p.windowJobs = now, 0
		}
		p.windowJobs += found
		if p.rt.cfg.BusyRate < 0 || p.windowJobs <= p.rt.cfg.BusyRate {
			return false
		}
		// Producers commit faster than notifications are worth: poll.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := store.Wake(cctx, p.queue, worker)
		cancel()
		if err != nil {
			// Still recorded as sleeping: producers keep notifying, which
			// loses nothing.
			p.log.Warn("cannot stop sleeping; notifications keep coming", zap.Error(err))
			return false
		}
		p.asleep, p.empties, p.pollEvery = false, 0, busyPollMin
		p.log.Debug("polling: jobs come faster than notifications are worth", zap.Int("jobs_per_second", p.windowJobs))
		p.busyPoll.Reset(p.pollEvery)
		return false
	}
	if more {
		return true
	}
	if found > 0 {
		p.empties, p.pollEvery = 0, busyPollMin
		p.busyPoll.Reset(p.pollEvery)
		return false
	}
	p.empties++
	if p.empties >= busyEmptyPolls {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		slept, err := store.Sleep(cctx, p.queue, worker)
		cancel()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("cannot sleep; polling on", zap.Error(err))
		}
		if err == nil && slept {
			p.asleep = true
			p.windowStart, p.windowJobs = time.Now(), 0
			p.busyPoll.Stop()
			p.log.Debug("sleeping: waiting for notifications")
			return true // once more: what committed before sleeping is seen now
		}
	}
	p.pollEvery = min(2*p.pollEvery, busyPollMax)
	p.busyPoll.Reset(p.pollEvery)
	return false
}

// forgetSleep deletes this worker's sleeping row of the queue when the
// producer stops (the registry deletes the rest at a clean stop).
func (p *producer) forgetSleep() {
	if !p.asleep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.rt.store.Wake(ctx, p.queue, p.rt.registry.id); err != nil {
		p.log.Debug("cannot delete the sleeping row", zap.Error(err))
	}
	p.asleep = false
}

// claim claims up to free jobs (fewer if the batch or the runtime's total
// caps it) and dispatches them; it reports how many it found and whether
// there may be more work right now.
func (p *producer) claim(ctx context.Context, free int) (found int, more bool, err error) {
	rt := p.rt
	want := min(free, rt.cfg.ClaimBatch)
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
	// returns them at once.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	hint := p.hint
	p.hint = 0
	if hint > 0 && p.asleep && len(rt.idKinds) > 0 {
		// Asleep, this worker found the queue empty, and one notification
		// since names the job that came: claim it by its id, then read the
		// queue's head for anything else (more), as a claim that filled
		// every slot does. The head's read rescues expired leases and sets
		// the due timer; it costs a statement after the pickup instead of
		// before it.
		cj, err := rt.store.ClaimID(cctx, hint, p.queue, rt.idKinds, rt.cfg.Lease)
		if err != nil {
			p.log.Warn("claim by id failed; claiming from the queue's head", zap.Int64("job_id", hint), zap.Error(err))
		}
		if cj != nil {
			if rt.total != nil && n > 1 {
				rt.total.Release(int64(n - 1))
			}
			rt.claimedByID.Add(1)
			p.dispatchClaimed(&claimer.ClaimResult{Jobs: []*claimer.Job{cj}})
			return 1, true, nil
		}
	}
	res, err := rt.store.Claim(cctx, p.queue, rt.kindNames, rt.limits, n, rt.cfg.Lease)
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
	p.dispatchClaimed(&res)
	more = len(res.Jobs) == n || res.Rescued > 0
	// Only ever move the timer earlier: a retry written while this claim was
	// on the wire set a due time the claim's snapshot could not see, and
	// must not be cleared. A due time that turns out stale costs one claim.
	if !more && res.HasNextDue {
		p.poller.DueWithin(res.NextDue)
	}
	return len(res.Jobs), more, nil
}

// dispatchClaimed reports a claim's jobs and runs them.
func (p *producer) dispatchClaimed(res *claimer.ClaimResult) {
	jobs := make([]*Job, len(res.Jobs))
	for i, cj := range res.Jobs {
		jobs[i] = newJob(cj)
	}
	p.rt.cfg.Observer.Claimed(p.queue, jobs, res.Rescued)
	for _, j := range jobs {
		p.dispatch(j)
	}
	p.poller.Claimed(len(res.Jobs))
}

// dispatch hands one claimed attempt to the completer, which owns it from
// now on, and runs it.
func (p *producer) dispatch(job *Job) {
	rt := p.rt
	p.running.Add(1)
	rt.claimed.Add(1)
	rt.handlers.Add(1)
	hctx, cancel := context.WithCancelCause(rt.workCtx)
	rt.completer.own(job.attempt(), job, cancel)
	go func() {
		defer rt.handlers.Done()
		defer p.release()
		rt.execute(hctx, cancel, job)
	}()
}

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
