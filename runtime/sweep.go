package runtime

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/fallbackpoll"
)

// sweeper is the safety poll of every queue of the runtime at once. A poll
// per queue (a claim each) made a worker's idle cost grow with its queues:
// one worker on 1 000 queues committed a thousand claims every safety
// interval while nothing happened. One statement now looks at every queue
// (claimer.Store.Sweep) and wakes only the producers that have work; each
// producer's own poller keeps just its due timer. Its poller has the
// intervals a queue's used to have: the safety poll while the wake source
// is healthy, the fast poll while it is down, the idle backoff of pure-poll
// mode.
type sweeper struct {
	rt     *Runtime
	poller *fallbackpoll.Poller
	log    *zap.Logger
	// paused is each queue's pause as the last sweep found it, for the
	// queue events; only the sweeper's goroutine uses it.
	paused map[string]bool
}

func newSweeper(rt *Runtime) (*sweeper, error) {
	poller, err := fallbackpoll.New(rt.cfg.pollConfig(""))
	if err != nil {
		return nil, err
	}
	return &sweeper{rt: rt, poller: poller, log: rt.log.Named("sweep"), paused: map[string]bool{}}, nil
}

// run sweeps at every wake of its poller until ctx ends.
func (s *sweeper) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.poller.Wakes():
		}
		s.sweep(ctx)
	}
}

// sweep wakes the producers of queues with runnable jobs, sets the due
// timers of queues with scheduled ones, and wakes a producer to rescue
// expired leases (any claim rescues them, on every queue).
func (s *sweeper) sweep(ctx context.Context) {
	rt := s.rt
	// The queues now: one AddQueue added is swept from the next poll on.
	producers := rt.producerList()
	queues := make([]string, len(producers))
	for i, p := range producers {
		queues[i] = p.queue
	}
	slices.Sort(queues)
	res, err := rt.store.Sweep(ctx, queues, rt.kindNames)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sweep failed; will retry at the next poll", zap.Error(err))
		}
		s.poller.Claimed(0)
		return
	}
	found := 0
	for _, q := range res.Queues {
		s.notePause(q.Queue, q.Paused)
		p := rt.producer(q.Queue)
		if p == nil || q.Paused {
			continue
		}
		if q.Runnable {
			found++
			p.poller.Wake(fallbackpoll.ReasonPoll)
		}
		if q.HasNextDue {
			p.poller.DueWithin(q.NextDue)
		}
	}
	if len(producers) > 0 {
		first := producers[0]
		switch {
		case res.Expired:
			found++
			first.poller.Wake(fallbackpoll.ReasonPoll)
		case res.HasNextExpiry:
			first.poller.DueWithin(res.NextExpiry)
		}
	}
	s.poller.Claimed(found)
}

// notePause sends a queue event when queue's pause changed since the last
// sweep (or the first sweep finds it paused).
func (s *sweeper) notePause(queue string, paused bool) {
	if s.paused[queue] == paused {
		return
	}
	s.paused[queue] = paused
	if !s.rt.events.active() {
		return
	}
	kind := EventQueueResumed
	if paused {
		kind = EventQueuePaused
	}
	s.rt.events.publish(Event{Kind: kind, Queue: queue, At: time.Now()})
}
