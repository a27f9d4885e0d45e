package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/claimer"
)

// completer owns every attempt of this worker, keyed by (id, attempt,
// started_at), from its claim until its outcome is durable: it keeps the
// lease alive by heartbeats the whole time (also while the outcome waits to
// be written), stops a handler whose lease was lost or whose job was
// cancelled, writes outcomes in batches through a claimer.Writer, and lets go
// of an attempt only once the database has its outcome (or says it is no
// longer this worker's).
//
// It also knows when it stops owning an attempt without being told: the
// lease is on the database clock, and this worker's view of it is a local
// deadline counted from before the statement that last extended the lease
// was sent (the claim, then each heartbeat that kept it). A timer of its own
// stops the handler a margin before that deadline, whatever the network or
// the row's locks do: a heartbeat that fails, hangs, or finds the row
// locked renews nothing, and one whose reply comes after the handler was
// stopped revives nothing. This is what keeps "never two at once" under a
// silent partition, where no heartbeat ever returns an error in time.
type completer struct {
	rt     *Runtime
	log    *zap.Logger
	writer *claimer.Writer

	mu          sync.Mutex
	owned       map[claimer.AttemptKey]*attempt
	interrupted []claimer.Attempt
	closed      bool
	inflight    sync.WaitGroup // Submit calls under way
	unwritten   []int64        // jobs of the outcomes the writer abandoned
	// stopping is set once the runtime stops claiming: an attempt whose
	// lease deadline passes from then on ends with nothing written (the
	// database did not answer its heartbeats), and counts as unwritten in
	// the stop's report, like an outcome the writer abandoned.
	stopping bool
	kick     chan struct{} // an attempt is due for a heartbeat earlier than the loop sleeps; capacity 1
	// deadlines and their one timer, set for timerAt (zero when unset).
	deadlines deadlines
	timer     *time.Timer
	timerAt   time.Time
	// sleepsUntil is when the heartbeat loop, asleep, wakes next; zero
	// while it is awake (it looks at every attempt again before it
	// sleeps). Only an attempt due before it needs a kick: one per claimed
	// attempt made the loop look at every owned attempt once per job.
	sleepsUntil time.Time
}

// attempt is one owned attempt.
type attempt struct {
	a   claimer.Attempt
	job *Job // its context (job.ctx) is how the completer stops the handler
	// leaseEnd is the local monotonic time before which the database's lease
	// surely holds: the send time of the statement that last extended it,
	// plus the lease.
	leaseEnd time.Time
	// stopAt is leaseEnd minus the margin: the attempt ends for this worker
	// then unless a renewal moved leaseEnd first (see deadlines). heapIndex
	// is its place among the deadlines, -1 once out of them.
	stopAt    time.Time
	heapIndex int
	// beatAt is when the next heartbeat of this attempt is due.
	beatAt time.Time
	// seen is set once a heartbeat recorded (heartbeat_at) that this worker
	// runs the attempt: the rescue of a lease that expires without one gives
	// the attempt back, as one whose claim reply was lost.
	seen bool
	// expired is set when the deadline passed while the handler ran: the
	// handler was stopped, nothing renews the lease any more.
	expired bool
	// finishing is set once the handler returned: the outcome is on its way
	// to the database, and the handler is not cancelled any more.
	finishing bool
	snoozed   bool          // its outcome is a snooze
	ran       time.Duration // how long the handler ran, once it returned
	err       error         // what the handler's failed attempt returned, for its event
}

// seenDelay is how long after its claim an attempt whose handler still runs
// gets its first heartbeat, which tells the database a worker runs it. A
// shorter job writes its outcome first and needs none, so the drain pays
// nothing for it; a worker that dies within it has its attempt given back
// by the rescue (at most three times per job), as if its claim reply had
// been lost.
const seenDelay = 100 * time.Millisecond

// leaseMargin is how long before its local lease end an attempt is over for
// this worker: enough for a cancelled handler or a killed command to stop
// before another worker may rescue the job.
func leaseMargin(lease time.Duration) time.Duration { return lease / 6 }

// ErrLeaseDeadline is the cause of a handler's context cancellation when the
// worker could not renew the attempt's lease in time (the database cut off,
// a heartbeat too slow, the row locked by another transaction). It wraps
// ErrLeaseLost: the worker stops the handler before the lease may run out,
// because another worker may rescue the job once it has.
var ErrLeaseDeadline = fmt.Errorf("%w: its lease could not be renewed in time", ErrLeaseLost)

func newCompleter(rt *Runtime) *completer {
	c := &completer{rt: rt, log: rt.log.Named("completer"), owned: map[claimer.AttemptKey]*attempt{},
		kick: make(chan struct{}, 1)}
	c.timer = time.AfterFunc(time.Hour, c.deadlinesDue)
	c.timer.Stop()
	c.writer = claimer.NewWriter(rt.store, claimer.WriterConfig{
		MaxBatch: rt.cfg.ClaimBatch, Logger: rt.log, OnWritten: c.written, OnAbandoned: c.abandoned,
		OnBatchCap: func(int) { rt.registry.update(context.Background(), rt.wakeState()) },
	})
	return c
}

// own takes an attempt the moment it is claimed. sent is when the claim
// statement was sent: the database's lease began after it.
func (c *completer) own(a claimer.Attempt, job *Job, sent time.Time) {
	lease := c.rt.cfg.Lease
	at := &job.own
	*at = attempt{a: a, job: job, leaseEnd: sent.Add(lease), beatAt: sent.Add(seenDelay), heapIndex: -1}
	key := a.Key()
	stopAt := at.leaseEnd.Add(-leaseMargin(lease))
	job.setOwnedUntil(stopAt)
	c.mu.Lock()
	c.owned[key] = at
	c.watchLocked(at, stopAt)
	kick := !c.sleepsUntil.IsZero() && at.beatAt.Before(c.sleepsUntil)
	c.mu.Unlock()
	if kick {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// cancelAll stops the handler of every attempt owned, with cause: work is
// cancelled (a hard stop, or the end of a graceful stop's time).
func (c *completer) cancelAll(cause error) {
	c.mu.Lock()
	jobs := make([]*Job, 0, len(c.owned))
	for _, at := range c.owned {
		jobs = append(jobs, at.job)
	}
	c.mu.Unlock()
	for _, j := range jobs {
		j.ctx.stop(cause)
	}
}

// cancelQueue stops, with cause, the handlers of the owned attempts of
// queue's jobs (RemoveQueue's deadline).
func (c *completer) cancelQueue(queue string, cause error) {
	c.mu.Lock()
	var jobs []*Job
	for _, at := range c.owned {
		if at.job.Queue == queue {
			jobs = append(jobs, at.job)
		}
	}
	c.mu.Unlock()
	for _, j := range jobs {
		j.ctx.stop(cause)
	}
}

// logDeadline says that the handler of at was stopped at its deadline
// (see deadlinesDue), at now.
func (c *completer) logDeadline(at *attempt, now time.Time) {
	c.log.Warn("lease not renewed in time; stopping the handler before another worker may rescue the job",
		zap.Int64("job_id", at.a.ID), zap.Int("attempt", at.a.Attempt), zap.Duration("lease_ends_in", at.leaseEnd.Sub(now)))
}

// dropLocked lets go of an attempt. c.mu is held.
func (c *completer) dropLocked(key claimer.AttemptKey) *attempt {
	at := c.owned[key]
	if at != nil {
		c.unwatchLocked(at)
		delete(c.owned, key)
	}
	return at
}

// finish takes a handler's result. Outcomes to write go to the writer; the
// attempt stays owned (and heartbeated) until the writer reports it.
func (c *completer) finish(job *Job, res result) {
	key := job.attempt().Key()
	c.mu.Lock()
	at := c.owned[key]
	if c.closed || at == nil {
		c.mu.Unlock()
		// Run has returned (a handler that ignored cancellation came back
		// after the grace), or the attempt was abandoned: its job runs again
		// after its lease expires.
		c.logFinish(job, res, zap.WarnLevel, "handler returned after this worker let go of the attempt; its result is discarded")
		return
	}
	if res.kind == resultCompletedInTx || res.kind == resultLeaseLost || res.kind == resultCancelled || res.kind == resultInterrupted {
		c.finishUnwritten(job, res, key, at) // unlocks c.mu
		return
	}
	at.finishing, at.ran, at.err = true, res.took, res.err
	c.unwatchLocked(at)
	if !at.seen {
		// The outcome says the attempt ran: only the lease needs keeping
		// until it is written.
		at.beatAt = at.leaseEnd.Add(c.rt.cfg.HeartbeatInterval - c.rt.cfg.Lease)
	}
	c.inflight.Add(1)
	c.mu.Unlock()
	c.submit(job, res, at)
}

// submit hands the outcome of at, whose handler returned res, to the
// writer. finish has counted it in c.inflight.
//
//go:noinline
func (c *completer) submit(job *Job, res result, at *attempt) {
	defer c.inflight.Done()
	out := claimer.Outcome{Attempt: at.a, OK: res.kind == resultOK}
	switch res.kind {
	case resultOK:
		out.Output = job.output
		if c.log.Core().Enabled(zap.DebugLevel) {
			c.logOutcome(job, res, &out)
		}
	case resultSnoozed:
		out.Snooze, out.Delay = true, res.delay
		c.mu.Lock()
		at.snoozed = true
		c.mu.Unlock()
		c.logOutcome(job, res, &out)
	case resultFailed:
		c.rt.failed.Add(1)
		out.Err, out.Permanent, out.Delay = res.err.Error(), res.permanent, res.delay
		c.logOutcome(job, res, &out)
	}
	if err := c.writer.Submit(out); err != nil {
		c.abandonedOne(out, err)
	}
}

// submit and the helpers below keep finish's own frame small. finish runs
// on every job's goroutine, which starts with a 2 KB stack: with the zap
// fields of every rare branch and the outcome's hand-off in its frame
// (2.7 KB), each job's goroutine grew its stack, copying it, and the runtime
// then freed the grown stack when the goroutine ended. Stack growth and
// stack allocation were a fifth of the Go CPU of a 100 000-job drain. They
// are not inlined, so their frames are on the stack only while they run,
// and only when their branch is taken.

// finishUnwritten ends an attempt whose outcome is not written by the
// writer: completed in the handler's transaction, lease lost, cancelled, or
// interrupted by the shutdown. It is called with c.mu held and unlocks it.
//
//go:noinline
func (c *completer) finishUnwritten(job *Job, res result, key claimer.AttemptKey, at *attempt) {
	obs := c.rt.cfg.Observer
	switch res.kind {
	case resultCompletedInTx:
		c.dropLocked(key)
		c.mu.Unlock()
		c.rt.completed.Add(1)
		c.rt.completedSinceRetention.Add(1)
		obs.Finished(job, OutcomeCompleted, res.took)
		if c.rt.events.active() {
			// Committed by the handler's own transaction before it returned.
			c.rt.events.publish(Event{Kind: EventCompleted, Queue: job.Queue, Job: job, Ran: res.took, At: time.Now()})
		}
	case resultLeaseLost:
		c.dropLocked(key)
		if c.stopping && at.expired {
			// Its own deadline ended it, not the database: nothing says
			// what became of the job, which runs again after its lease.
			c.unwritten = append(c.unwritten, key.ID)
		}
		c.mu.Unlock()
		c.rt.leaseLost.Add(1)
		obs.Finished(job, OutcomeLeaseLost, res.took)
		c.logFinish(job, res, zap.WarnLevel, "lease lost while the handler ran; its result is discarded")
	case resultCancelled:
		c.dropLocked(key)
		c.mu.Unlock()
		c.rt.cancelled.Add(1)
		obs.Finished(job, OutcomeCancelled, res.took)
		if c.rt.events.active() {
			// The cancellation was committed before a heartbeat found it.
			c.rt.events.publish(Event{Kind: EventCancelled, Queue: job.Queue, Job: job, Error: errText(res.err),
				Ran: res.took, At: time.Now()})
		}
		c.logFinish(job, res, zap.InfoLevel, "job cancelled while it ran; the handler was stopped")
	case resultInterrupted:
		at.finishing, at.ran = true, res.took
		c.unwatchLocked(at)
		c.interrupted = append(c.interrupted, at.a)
		c.mu.Unlock()
		c.logFinish(job, res, zap.InfoLevel, "handler stopped by shutdown; the job goes back to the queue")
	default:
		c.mu.Unlock()
	}
}

// logFinish logs, at level, an attempt that ended without an outcome to
// write.
//
//go:noinline
func (c *completer) logFinish(job *Job, res result, level zapcore.Level, msg string) {
	c.log.Log(level, msg, zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
		zap.NamedError("handler_error", res.err))
}

// logOutcome logs the outcome finish is about to write.
//
//go:noinline
func (c *completer) logOutcome(job *Job, res result, out *claimer.Outcome) {
	switch res.kind {
	case resultSnoozed:
		c.log.Debug("job snoozed", zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Duration("for", res.delay))
	case resultFailed:
		c.log.Warn("job attempt failed", zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
			zap.Bool("permanent", out.Permanent), zap.Bool("last_attempt", job.Attempt >= job.MaxAttempts), zap.Error(res.err))
	default:
		c.log.Debug("job completed", zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
			zap.Duration("took", res.took))
	}
}

// abandonedOne is abandoned for one outcome the writer refused.
//
//go:noinline
func (c *completer) abandonedOne(out claimer.Outcome, err error) {
	c.abandoned([]claimer.Outcome{out}, err)
}

// written is called by the writer after each batch.
func (c *completer) written(fin []claimer.Finished) {
	c.mu.Lock()
	ats := make([]*attempt, len(fin))
	for i, f := range fin {
		ats[i] = c.dropLocked(f.Key)
	}
	c.mu.Unlock()
	obs := c.rt.cfg.Observer
	// The batch is committed: its events may go out. Nothing is built when
	// no one subscribed.
	var evs []Event
	var now time.Time
	emit := c.rt.events.active()
	if emit {
		evs, now = make([]Event, 0, len(fin)), time.Now()
	}
	for i, f := range fin {
		at := ats[i]
		if at != nil {
			outcome := outcomeOf(f.State)
			if at.snoozed && f.State == StatePending {
				outcome = OutcomeSnoozed
			}
			obs.Finished(at.job, outcome, at.ran)
			if emit {
				if ev, ok := outcomeEvent(at, f, outcome, now); ok {
					evs = append(evs, ev)
				}
			}
		}
		switch f.State {
		case StateCompleted:
			c.rt.completed.Add(1)
			c.rt.completedSinceRetention.Add(1)
		case StatePending:
			if at != nil && at.snoozed {
				c.rt.snoozed.Add(1)
			}
			// This worker learns of its own retry at once; others through
			// the update trigger's notification.
			if at != nil {
				if p := c.rt.producer(at.job.Queue); p != nil {
					p.poller.DueWithin(f.DueIn)
				}
			}
		case StateDead:
			c.log.Warn("job is dead", zap.Int64("job_id", f.Key.ID), zap.Int("attempt", f.Key.Attempt))
		case StateCancelled:
			c.rt.cancelled.Add(1)
			c.log.Info("job not retried: another job holds its unique key and runs instead",
				zap.Int64("job_id", f.Key.ID), zap.Int("attempt", f.Key.Attempt))
		case claimer.StateFenced:
			c.log.Warn("result rejected: the attempt is no longer this worker's (lease lost, cancelled, or completed in the handler's transaction)",
				zap.Int64("job_id", f.Key.ID), zap.Int("attempt", f.Key.Attempt))
		}
	}
	if len(evs) > 0 {
		c.rt.events.publish(evs...)
	}
}

// outcomeEvent is the event of an attempt whose outcome was written as f;
// none for an outcome refused as no longer this worker's.
func outcomeEvent(at *attempt, f claimer.Finished, outcome Outcome, now time.Time) (Event, bool) {
	ev := Event{Queue: at.job.Queue, Job: at.job, Ran: at.ran, At: now}
	switch outcome {
	case OutcomeCompleted:
		ev.Kind = EventCompleted
	case OutcomeRetried:
		ev.Kind, ev.Error, ev.RunAt = EventRetried, errText(at.err), now.Add(f.DueIn)
	case OutcomeSnoozed:
		ev.Kind, ev.RunAt = EventSnoozed, now.Add(f.DueIn)
	case OutcomeDead:
		ev.Kind, ev.Error = EventDead, errText(at.err)
	case OutcomeCancelled:
		ev.Kind, ev.Error = EventCancelled, errText(at.err)
	default:
		return Event{}, false
	}
	return ev, true
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// outcomeOf maps the state fila_finish reports to an Outcome.
func outcomeOf(state string) Outcome {
	switch state {
	case StateCompleted:
		return OutcomeCompleted
	case StatePending:
		return OutcomeRetried
	case StateDead:
		return OutcomeDead
	case StateCancelled:
		return OutcomeCancelled
	}
	return OutcomeFenced
}

// abandoned lets go of attempts whose outcomes cannot be written: their
// leases expire and their jobs run again.
func (c *completer) abandoned(outs []claimer.Outcome, _ error) {
	c.mu.Lock()
	for _, o := range outs {
		c.dropLocked(o.Key())
	}
	for _, o := range outs {
		c.unwritten = append(c.unwritten, o.ID)
	}
	c.mu.Unlock()
}

// stopBegan marks the start of the stop (see stopping).
func (c *completer) stopBegan() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
}

// unsettled lists the jobs of the attempts whose outcome or release was not
// written: those abandoned by the writer, those whose lease deadline passed
// during the stop, and those still owned.
func (c *completer) unsettled() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := slices.Clone(c.unwritten)
	for k := range c.owned {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	return ids
}

// heartbeatLoop extends the leases of owned attempts as each comes due
// (HeartbeatInterval after the statement that last extended it was sent,
// and seenDelay after its claim for the first), and stops the handlers of
// attempts that are no longer this worker's or were cancelled.
func (c *completer) heartbeatLoop(ctx context.Context) {
	cfg := c.rt.cfg
	// A heartbeat may take half the time left before the first of its
	// attempts' deadlines, and at least half an interval: a slow database
	// gets all the time that can still help, and a connection gone silent
	// is given up while another try on a fresh one can still land. One
	// given up is tried again at once; one that failed otherwise (the
	// server refusing connections, say), a quarter interval later. The
	// deadline does not depend on any of them returning.
	retry := cfg.HeartbeatInterval / 4
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		due, next := c.dueForHeartbeat(time.Now())
		if len(due) == 0 {
			wait := time.Hour
			if !next.IsZero() {
				wait = time.Until(next)
			}
			wake.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-wake.C:
			case <-c.kick:
			}
			wake.Stop()
			continue
		}
		sent := time.Now()
		timeout := max(cfg.HeartbeatInterval/2, c.firstStop(due).Sub(sent)/2)
		hbCtx, cancel := context.WithTimeout(ctx, timeout)
		got, err := c.rt.store.Heartbeat(hbCtx, due, cfg.Lease)
		cancel()
		again := retry
		if claimer.IsTimeout(err) {
			again = 10 * time.Millisecond // it took its timeout already
		}
		if ctx.Err() != nil {
			return
		}
		var lost, cancelled, busy, busyNearStop int
		now := time.Now()
		c.mu.Lock()
		for _, a := range due {
			at := c.owned[a.Key()]
			if at == nil {
				continue // finished meanwhile
			}
			switch status := got[a.Key()]; {
			case err != nil:
				// Nothing renewed: try again soon, while the deadline runs.
				at.beatAt = now.Add(again)
			case status == claimer.Busy:
				// Usually the handler's own transaction, completing the job
				// in it (CompleteTx): a moment, and nothing to say. Said when
				// the deadline comes near.
				at.beatAt = now.Add(retry)
				busy++
				if !at.finishing && at.leaseEnd.Add(-leaseMargin(cfg.Lease)).Sub(now) < cfg.HeartbeatInterval {
					busyNearStop++
				}
			case status == claimer.Kept:
				at.seen = true
				at.beatAt = sent.Add(cfg.HeartbeatInterval)
				if at.expired || !sent.Add(cfg.Lease).After(at.leaseEnd) {
					continue // a late renewal revives nothing
				}
				at.leaseEnd = sent.Add(cfg.Lease)
				if !at.finishing {
					stopAt := at.leaseEnd.Add(-leaseMargin(cfg.Lease))
					c.watchLocked(at, stopAt)
					at.job.setOwnedUntil(stopAt)
				}
			case status == claimer.Cancelled:
				cancelled++
				at.job.ctx.stop(ErrCancelled)
				at.beatAt = now.Add(cfg.HeartbeatInterval)
			default:
				lost++
				at.job.ctx.stop(ErrLeaseLost)
				at.beatAt = now.Add(cfg.HeartbeatInterval)
			}
		}
		c.mu.Unlock()
		switch {
		case err != nil:
			c.log.Error("heartbeat failed; will retry", zap.Int("jobs", len(due)), zap.Duration("retry_in", again), zap.Error(err))
		case lost > 0:
			c.log.Warn("leases lost; stopping those handlers", zap.Int("lost", lost))
		}
		if busyNearStop > 0 {
			c.log.Warn("job rows locked by another transaction; their leases were not renewed, and their handlers stop soon unless the lock goes",
				zap.Int("jobs", busyNearStop), zap.Duration("retry_in", retry))
		} else if busy > 0 {
			c.log.Debug("job rows locked by another transaction; their leases are renewed at the next try",
				zap.Int("jobs", busy), zap.Duration("retry_in", retry))
		}
		if cancelled > 0 {
			c.log.Info("jobs cancelled; stopping their handlers", zap.Int("cancelled", cancelled))
		}
	}
}

// firstStop is the earliest local deadline among the attempts of as whose
// handlers still run; far ahead when there is none.
func (c *completer) firstStop(as []claimer.Attempt) time.Time {
	margin := leaseMargin(c.rt.cfg.Lease)
	first := time.Now().Add(c.rt.cfg.Lease)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range as {
		if at := c.owned[a.Key()]; at != nil && !at.finishing {
			if stop := at.leaseEnd.Add(-margin); stop.Before(first) {
				first = stop
			}
		}
	}
	return first
}

// dueForHeartbeat returns, once some attempt's heartbeat is due, the
// attempts to renew in one statement: those due now, plus those that will
// be within a quarter interval (a renewal a little early costs nothing) or,
// for a first heartbeat, within half of seenDelay. Otherwise it returns
// when the next one is due (zero when none is). Attempts stopped at their
// deadline are left alone: their handlers were cancelled, and renewing
// their leases would only keep their jobs from the rescue.
func (c *completer) dueForHeartbeat(now time.Time) (due []claimer.Attempt, next time.Time) {
	early := c.rt.cfg.HeartbeatInterval / 4
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.owned {
		if !at.expired && (next.IsZero() || at.beatAt.Before(next)) {
			next = at.beatAt
		}
	}
	if next.IsZero() || next.After(now) {
		// The loop sleeps until next, or an hour when nothing is owned.
		c.sleepsUntil = next
		if next.IsZero() {
			c.sleepsUntil = now.Add(time.Hour)
		}
		return nil, next
	}
	c.sleepsUntil = time.Time{}
	for _, at := range c.owned {
		window := early
		if !at.seen {
			window = seenDelay / 2
		}
		if !at.expired && !at.beatAt.After(now.Add(window)) {
			due = append(due, at.a)
		}
	}
	return due, time.Time{}
}

// releaseInterrupted gives jobs interrupted by a hard stop back to the
// queue, within ctx.
func (c *completer) releaseInterrupted(ctx context.Context) {
	c.mu.Lock()
	ret := c.interrupted
	c.interrupted = nil
	c.mu.Unlock()
	if len(ret) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := c.rt.store.Release(ctx, ret, "interrupted by worker shutdown")
	if err != nil {
		c.log.Error("could not return interrupted jobs; they return when their leases expire",
			zap.Int("jobs", len(ret)), zap.Error(err))
		return
	}
	c.mu.Lock()
	for _, a := range ret {
		if at := c.dropLocked(a.Key()); at != nil {
			c.rt.cfg.Observer.Finished(at.job, OutcomeReleased, at.ran)
		}
	}
	c.mu.Unlock()
	c.rt.released.Add(uint64(n))
	c.log.Info("returned interrupted jobs to the queue", zap.Int("jobs", n))
}

// close stops taking results: a handler that returns later has its result
// discarded. The writer then writes what it has and stops. The deadlines'
// timer is stopped too: the handlers of attempts still owned were cancelled
// and waited for already, and a deadline passing after Run returned would
// only log about a worker that is gone.
func (c *completer) close() {
	c.mu.Lock()
	c.closed = true // the timer is not set again, and ends nothing
	c.timer.Stop()
	c.mu.Unlock()
	c.inflight.Wait()
	c.writer.Close()
}

// ownedIDs lists the jobs of attempts still owned.
func (c *completer) ownedIDs() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int64, 0, len(c.owned))
	for k := range c.owned {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	return ids
}
