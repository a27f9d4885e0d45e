package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
)

// Errors of AddQueue and RemoveQueue.
var (
	// ErrNotRunning is returned when the runtime has not started claiming
	// yet, or has stopped: queues a runtime works from its start are
	// listed in Config.Queues.
	ErrNotRunning = errors.New("fila: runtime is not running")
	// ErrQueueExists is wrapped by AddQueue's error for a queue the runtime
	// already works.
	ErrQueueExists = errors.New("fila: the runtime already works this queue")
	// ErrUnknownQueue is wrapped by RemoveQueue's error for a queue the
	// runtime does not work.
	ErrUnknownQueue = errors.New("fila: the runtime does not work this queue")
)

// QueueConfig configures a queue added by AddQueue.
type QueueConfig struct {
	// Concurrency is how many of the queue's handlers run at once, as
	// Config.QueueConcurrency sets it for a queue given at the start
	// (Config.MaxConcurrency still caps all queues together). Allowed 1 to
	// ConcurrencyMax. Defaults to Config.Concurrency.
	Concurrency int
}

// AddQueue makes a running runtime work one more queue, exactly as one of
// Config.Queues: woken by its notifications, covered by the safety poll,
// counted in Stats and by an Observer, with its own concurrency and within
// MaxConcurrency. It returns once the wake source follows the queue, so a
// job committed afterwards wakes it at once; if ctx ends first, the queue
// is worked all the same (the wake source follows it as soon as it can, the
// safety poll meanwhile) and the error says so. It returns ErrNotRunning
// before Run has connected and once the runtime stops claiming, and an
// error wrapping ErrQueueExists for a queue the runtime works already.
func (r *Runtime) AddQueue(ctx context.Context, queue string, qc QueueConfig) error {
	if err := channel.ValidateQueue(queue); err != nil {
		return fmt.Errorf("add queue: %w", err)
	}
	limit := qc.Concurrency
	if limit == 0 {
		limit = r.cfg.Concurrency
	}
	if limit < 1 || limit > ConcurrencyMax {
		return fmt.Errorf("add queue %q: Concurrency %d out of range: allowed 1 to %d", queue, limit, ConcurrencyMax)
	}
	p, err := newProducer(r, queue, limit)
	if err != nil {
		return fmt.Errorf("add queue %q: %w", queue, err)
	}

	r.ctlMu.Lock()
	if r.claimGroup == nil || r.claimGroupCtx.Err() != nil {
		r.ctlMu.Unlock()
		return fmt.Errorf("add queue %q: %w (before Run, list it in Config.Queues)", queue, ErrNotRunning)
	}
	if r.producer(queue) != nil {
		r.ctlMu.Unlock()
		return fmt.Errorf("add queue: %w: %q", ErrQueueExists, queue)
	}
	for d := range r.draining {
		if d.queue == queue {
			// Its removal's deadline cancels the queue's handlers by name:
			// it would cancel the new producer's too.
			r.ctlMu.Unlock()
			return fmt.Errorf("add queue %q: its removal still waits for its running handlers; add it once RemoveQueue returned", queue)
		}
	}
	// The wake source follows the queue before its first claim: a job
	// committed after that claim's snapshot is announced, one committed
	// before is claimed by it.
	var following <-chan struct{}
	src := r.source
	if src != nil {
		if following, err = src.AddQueue(queue); err != nil {
			r.ctlMu.Unlock()
			return fmt.Errorf("add queue %q: %w", queue, err)
		}
		p.poller.SetHealthy(src.Healthy())
	}
	producers := append(slices.Clone(r.producerList()), p)
	r.producers.Store(&producers)
	p.start(r.claimGroupCtx, r.claimGroup.Go, func() {})
	r.ctlMu.Unlock()

	r.log.Info("queue added", zap.String("queue", queue), zap.Int("concurrency", limit))
	// Its (queue, kind) pairs, for `fila enqueue`'s kind check, and the
	// worker's row, whose queues operators read.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err = r.registry.registerKinds(rctx)
	cancel()
	if err != nil {
		r.log.Warn("cannot register the added queue's kinds", zap.String("queue", queue), zap.Error(err))
	}
	r.registry.update(ctx, r.wakeState())
	if src == nil || !src.Healthy() {
		// Polled (fast while the wake source is down); a source that
		// connects later follows it from its first LISTEN.
		return nil
	}
	select {
	case <-following:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("queue %q is worked, but the wake source does not follow it yet "+
			"(the safety poll finds its jobs until it does): %w", queue, ctx.Err())
	}
}

// RemoveQueue makes a running runtime stop claiming from queue, and waits
// for the queue's running handlers to return, as Stop does for every queue:
// when ctx ends first, they are cancelled (their jobs go back to pending at
// once), and RemoveQueue returns ctx's error once they returned or
// HardStopGrace passed. The queue's jobs stay pending for other workers, or
// for this one if it adds the queue again. It returns an error wrapping
// ErrUnknownQueue for a queue the runtime does not work, and ErrNotRunning
// when the runtime is not running.
func (r *Runtime) RemoveQueue(ctx context.Context, queue string) error {
	if err := channel.ValidateQueue(queue); err != nil {
		return fmt.Errorf("remove queue: %w", err)
	}
	r.ctlMu.Lock()
	if r.claimGroup == nil {
		r.ctlMu.Unlock()
		return fmt.Errorf("remove queue %q: %w", queue, ErrNotRunning)
	}
	p := r.producer(queue)
	if p == nil || r.draining[p] {
		known := r.Queues()
		r.ctlMu.Unlock()
		return fmt.Errorf("remove queue: %w: %q (it works %v)", ErrUnknownQueue, queue, known)
	}
	if r.draining == nil {
		r.draining = map[*producer]bool{}
	}
	r.draining[p] = true
	r.ctlMu.Unlock()
	defer func() {
		r.ctlMu.Lock()
		delete(r.draining, p)
		r.ctlMu.Unlock()
	}()

	p.stopClaiming()
	// A claim in flight is not cut short (see producer.claim): its jobs are
	// dispatched and drained with the rest.
	<-p.claimingDone
	// Out of the queues only now: once Queues no longer names it, nothing
	// is claimed from it (before, a claim following the queue's last
	// notification could still take a job inserted after that).
	r.ctlMu.Lock()
	producers := slices.DeleteFunc(slices.Clone(r.producerList()), func(o *producer) bool { return o == p })
	r.producers.Store(&producers)
	if r.source != nil {
		if err := r.source.RemoveQueue(queue); err != nil {
			r.log.Warn("the wake source did not follow the removed queue", zap.String("queue", queue), zap.Error(err))
		}
	}
	r.ctlMu.Unlock()
	r.log.Info("queue removed; waiting for its running handlers", zap.String("queue", queue),
		zap.Int("running", int(p.running.Load())))
	r.registry.update(ctx, r.wakeState())
	idle := make(chan struct{})
	go func() { p.handlers.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	r.log.Warn("queue removal deadline passed; cancelling its running handlers", zap.String("queue", queue),
		zap.Int("running", int(p.running.Load())))
	r.completer.cancelQueue(queue, ErrShutdown)
	select {
	case <-idle:
	case <-time.After(r.cfg.HardStopGrace):
	}
	// Give the interrupted jobs back now, not at the runtime's stop.
	r.completer.releaseInterrupted(r.lastCtx)
	return fmt.Errorf("remove queue %q: %w", queue, ctx.Err())
}
