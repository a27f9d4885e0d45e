package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/fila-run/fila/fallbackpoll"
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
}

func newProducer(rt *Runtime, queue string) (*producer, error) {
	poller, err := fallbackpoll.New(rt.cfg.pollConfig(queue))
	if err != nil {
		return nil, err
	}
	return &producer{rt: rt, queue: queue, limit: rt.cfg.concurrency(queue), poller: poller,
		log: rt.log.With(zap.String("queue", queue)), freed: make(chan struct{}, 1)}, nil
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
	// A claim of one job per freed slot would cost a statement per job under
	// load; once busy, wait until a tenth of the slots are free.
	threshold := max(1, p.limit/10)
	first := true
	dirty := true
	for {
		if dirty {
			running := int(p.running.Load())
			if free := p.limit - running; free > 0 && (free >= threshold || running == 0) {
				obs.Woken(p.queue, reason)
				more, err := p.claim(ctx, free)
				if first {
					first = false
					claimedOnce()
				}
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
		case why := <-p.poller.Wakes():
			dirty, reason = true, WakePoll
			if why == fallbackpoll.ReasonDue {
				reason = WakeTimer
			}
		case <-p.freed:
			reason = WakeSlot
		}
	}
}

// claim claims up to free jobs (fewer if the batch or the runtime's total
// caps it) and dispatches them; it reports whether there may be more work
// right now.
func (p *producer) claim(ctx context.Context, free int) (more bool, err error) {
	rt := p.rt
	want := min(free, rt.cfg.ClaimBatch)
	n := want
	if rt.total != nil {
		// Queues wait for the shared total in turn (the semaphore is FIFO):
		// one slot blocking, then as many more as are free and not awaited.
		if err := rt.total.Acquire(ctx, 1); err != nil {
			return false, nil
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
	res, err := rt.store.Claim(cctx, p.queue, rt.kindNames, rt.limits, n, rt.cfg.Lease)
	cancel()
	if err != nil {
		if rt.total != nil {
			rt.total.Release(int64(n))
		}
		return true, err
	}
	if rt.total != nil && len(res.Jobs) < n {
		rt.total.Release(int64(n - len(res.Jobs)))
	}
	if res.Rescued > 0 {
		p.log.Warn("rescued jobs whose lease expired", zap.Int("jobs", res.Rescued))
	}
	jobs := make([]*Job, len(res.Jobs))
	for i, cj := range res.Jobs {
		jobs[i] = newJob(cj)
	}
	rt.cfg.Observer.Claimed(p.queue, jobs, res.Rescued)
	for _, j := range jobs {
		p.dispatch(j)
	}
	p.poller.Claimed(len(res.Jobs))
	more = len(res.Jobs) == n || res.Rescued > 0
	// Only ever move the timer earlier: a retry written while this claim was
	// on the wire set a due time the claim's snapshot could not see, and
	// must not be cleared. A due time that turns out stale costs one claim.
	if !more && res.HasNextDue {
		p.poller.DueWithin(res.NextDue)
	}
	return more, nil
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
