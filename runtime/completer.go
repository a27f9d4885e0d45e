package runtime

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
)

// completer owns every attempt of this worker, keyed by (id, attempt,
// started_at), from its claim until its outcome is durable: it keeps the
// lease alive by heartbeats the whole time (also while the outcome waits to
// be written), stops a handler whose lease was lost or whose job was
// cancelled, writes outcomes in batches through a claimer.Writer, and lets go
// of an attempt only once the database has its outcome (or says it is no
// longer this worker's).
type completer struct {
	rt     *Runtime
	log    *zap.Logger
	writer *claimer.Writer

	mu          sync.Mutex
	owned       map[claimer.AttemptKey]*attempt
	interrupted []claimer.Attempt
	closed      bool
	inflight    sync.WaitGroup // Submit calls under way
}

// attempt is one owned attempt.
type attempt struct {
	a      claimer.Attempt
	job    *Job
	cancel context.CancelCauseFunc
	// renewed is the local monotonic time of the claim or of the last
	// heartbeat that kept the lease.
	renewed time.Time
	// finishing is set once the handler returned: the outcome is on its way
	// to the database, and the handler is not cancelled any more.
	finishing bool
	ran       time.Duration // how long the handler ran, once it returned
}

func newCompleter(rt *Runtime) *completer {
	c := &completer{rt: rt, log: rt.log.Named("completer"), owned: map[claimer.AttemptKey]*attempt{}}
	c.writer = claimer.NewWriter(rt.store, claimer.WriterConfig{
		MaxBatch: rt.cfg.ClaimBatch, Logger: rt.log, OnWritten: c.written, OnAbandoned: c.abandoned,
	})
	return c
}

// own takes an attempt the moment it is claimed.
func (c *completer) own(a claimer.Attempt, job *Job, cancel context.CancelCauseFunc) {
	c.mu.Lock()
	c.owned[a.Key()] = &attempt{a: a, job: job, cancel: cancel, renewed: time.Now()}
	c.mu.Unlock()
}

// finish takes a handler's result. Outcomes to write go to the writer; the
// attempt stays owned (and heartbeated) until the writer reports it.
func (c *completer) finish(job *Job, res result) {
	key := job.attempt().Key()
	log := func() *zap.Logger {
		return c.log.With(zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt))
	}
	c.mu.Lock()
	at := c.owned[key]
	if c.closed || at == nil {
		c.mu.Unlock()
		// Run has returned (a handler that ignored cancellation came back
		// after the grace), or the attempt was abandoned: its job runs again
		// after its lease expires.
		log().Warn("handler returned after this worker let go of the attempt; its result is discarded",
			zap.NamedError("handler_error", res.err))
		return
	}
	obs := c.rt.cfg.Observer
	switch res.kind {
	case resultCompletedInTx:
		delete(c.owned, key)
		c.mu.Unlock()
		c.rt.completed.Add(1)
		c.rt.completedSinceRetention.Add(1)
		obs.Finished(job, OutcomeCompleted, res.took)
		return
	case resultLeaseLost:
		delete(c.owned, key)
		c.mu.Unlock()
		c.rt.leaseLost.Add(1)
		obs.Finished(job, OutcomeLeaseLost, res.took)
		log().Warn("lease lost while the handler ran; its result is discarded", zap.NamedError("handler_error", res.err))
		return
	case resultCancelled:
		delete(c.owned, key)
		c.mu.Unlock()
		c.rt.cancelled.Add(1)
		obs.Finished(job, OutcomeCancelled, res.took)
		log().Info("job cancelled while it ran; the handler was stopped", zap.NamedError("handler_error", res.err))
		return
	case resultInterrupted:
		at.finishing, at.ran = true, res.took
		c.interrupted = append(c.interrupted, at.a)
		c.mu.Unlock()
		log().Info("handler stopped by shutdown; the job goes back to the queue", zap.NamedError("handler_error", res.err))
		return
	}
	at.finishing, at.ran = true, res.took
	c.inflight.Add(1)
	c.mu.Unlock()
	defer c.inflight.Done()

	out := claimer.Outcome{Attempt: at.a, OK: res.kind == resultOK}
	if res.kind == resultFailed {
		c.rt.failed.Add(1)
		out.Err, out.Permanent, out.Delay = res.err.Error(), res.permanent, res.delay
		log().Warn("job attempt failed", zap.Bool("permanent", out.Permanent),
			zap.Bool("last_attempt", job.Attempt >= job.MaxAttempts), zap.Error(res.err))
	} else if ce := c.log.Check(zap.DebugLevel, "job completed"); ce != nil {
		ce.Write(zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
			zap.Duration("took", res.took))
	}
	if err := c.writer.Submit(out); err != nil {
		c.abandoned([]claimer.Outcome{out}, err)
	}
}

// written is called by the writer after each batch.
func (c *completer) written(fin []claimer.Finished) {
	c.mu.Lock()
	ats := make([]*attempt, len(fin))
	for i, f := range fin {
		ats[i] = c.owned[f.Key]
		delete(c.owned, f.Key)
	}
	c.mu.Unlock()
	obs := c.rt.cfg.Observer
	for i, f := range fin {
		at := ats[i]
		if at != nil {
			obs.Finished(at.job, outcomeOf(f.State), at.ran)
		}
		switch f.State {
		case "completed":
			c.rt.completed.Add(1)
			c.rt.completedSinceRetention.Add(1)
		case "pending":
			// This worker learns of its own retry at once; others through
			// the update trigger's notification.
			if at != nil {
				if p := c.rt.producer(at.job.Queue); p != nil {
					p.poller.DueWithin(f.DueIn)
				}
			}
		case "dead":
			c.log.Warn("job is dead", zap.Int64("job_id", f.Key.ID), zap.Int("attempt", f.Key.Attempt))
		case claimer.StateFenced:
			c.log.Warn("result rejected: the attempt is no longer this worker's (lease lost, cancelled, or completed in the handler's transaction)",
				zap.Int64("job_id", f.Key.ID), zap.Int("attempt", f.Key.Attempt))
		}
	}
}

// outcomeOf maps the state fila_finish reports to an Outcome.
func outcomeOf(state string) Outcome {
	switch state {
	case "completed":
		return OutcomeCompleted
	case "pending":
		return OutcomeRetried
	case "dead":
		return OutcomeDead
	}
	return OutcomeFenced
}

// abandoned lets go of attempts whose outcomes cannot be written: their
// leases expire and their jobs run again.
func (c *completer) abandoned(outs []claimer.Outcome, _ error) {
	c.mu.Lock()
	for _, o := range outs {
		delete(c.owned, o.Key())
	}
	c.mu.Unlock()
}

// heartbeatLoop extends the leases of every owned attempt, and stops the
// handlers of attempts that are no longer this worker's or were cancelled.
func (c *completer) heartbeatLoop(ctx context.Context) {
	lease, every := c.rt.cfg.Lease, c.rt.cfg.HeartbeatInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		owned := make([]claimer.Attempt, 0, len(c.owned))
		for _, at := range c.owned {
			owned = append(owned, at.a)
		}
		c.mu.Unlock()
		if len(owned) == 0 {
			continue
		}
		sent := time.Now()
		// A slow heartbeat that still lands before the lease runs out keeps
		// the job; giving up at the next tick would only let it expire.
		hbCtx, cancel := context.WithTimeout(ctx, lease/2)
		got, err := c.rt.store.Heartbeat(hbCtx, owned, lease)
		cancel()
		var lost, cancelled int
		c.mu.Lock()
		for _, a := range owned {
			at := c.owned[a.Key()]
			if at == nil {
				continue // finished meanwhile
			}
			switch status := got[a.Key()]; {
			case err == nil && status == claimer.Kept:
				at.renewed = sent
			case err == nil && status == claimer.Busy:
			case err == nil && status == claimer.Cancelled:
				cancelled++
				at.cancel(ErrCancelled)
			case err == nil:
				lost++
				at.cancel(ErrLeaseLost)
			case time.Since(at.renewed) > lease-every/2:
				// The lease cannot be confirmed and is about to run out: stop
				// rather than risk running alongside the worker that rescues it.
				lost++
				at.cancel(ErrLeaseLost)
			}
		}
		c.mu.Unlock()
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Error("heartbeat failed; will retry", zap.Int("jobs", len(owned)), zap.Error(err))
		case lost > 0:
			c.log.Warn("leases lost; stopping those handlers", zap.Int("lost", lost))
		}
		if cancelled > 0 {
			c.log.Info("jobs cancelled; stopping their handlers", zap.Int("cancelled", cancelled))
		}
	}
}

// releaseInterrupted gives jobs interrupted by a hard stop back to the queue.
func (c *completer) releaseInterrupted() {
	c.mu.Lock()
	ret := c.interrupted
	c.interrupted = nil
	c.mu.Unlock()
	if len(ret) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.rt.store.Release(ctx, ret, "interrupted by worker shutdown")
	if err != nil {
		c.log.Error("could not return interrupted jobs; they return when their leases expire",
			zap.Int("jobs", len(ret)), zap.Error(err))
		return
	}
	c.mu.Lock()
	for _, a := range ret {
		if at := c.owned[a.Key()]; at != nil {
			c.rt.cfg.Observer.Finished(at.job, OutcomeReleased, at.ran)
		}
		delete(c.owned, a.Key())
	}
	c.mu.Unlock()
	c.rt.released.Add(uint64(n))
	c.log.Info("returned interrupted jobs to the queue", zap.Int("jobs", n))
}

// close stops taking results: a handler that returns later has its result
// discarded. The writer then writes what it has and stops.
func (c *completer) close() {
	c.mu.Lock()
	c.closed = true
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
