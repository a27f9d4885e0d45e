package listener

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// Source is a wake source: it tells claimers "there may be work, claim from
// the head of the queue".
type Source interface {
	// Run blocks until ctx is cancelled, then returns nil. It returns an error
	// only when it cannot go on at all (an invalid DSN, a pooler in the way,
	// a server that cannot do what the source needs); transient failures are
	// retried forever.
	Run(ctx context.Context) error
	// Wakes has capacity 1 and coalesces: a send on a full channel is dropped.
	// It is signalled on each event and right after every (re)connect, since
	// events sent during a gap are gone.
	Wakes() <-chan struct{}
	// WakesFor is like Wakes for one of the source's queues: signalled on
	// events of that queue and after every (re)connect. It is nil for a
	// queue the source does not follow.
	WakesFor(queue string) <-chan struct{}
	// Ready is closed once the source first listens, so a claim scan started
	// after it misses nothing.
	Ready() <-chan struct{}
	// Healthy reports whether the source is connected, listening, and its
	// last health check was answered.
	Healthy() bool
	// HealthChanges has capacity 1 and coalesces; it is signalled whenever
	// Healthy flips.
	HealthChanges() <-chan struct{}
}

// Hinter is implemented by a source that can say which job woke a queue.
type Hinter interface {
	// TakeHint returns, and forgets, the id of the one job whose event woke
	// queue since the last call: 0 when no event named a job, and
	// HintMany when several events came or some may have been lost (a
	// reconnect), when the claimer must read the queue's head.
	TakeHint(queue string) int64
}

// HintMany is the hint of a queue woken by more than one event, or by a
// reconnect.
const HintMany int64 = -1

// Stats is a snapshot of a source's counters, for the stats command and logs.
type Stats struct {
	Notifications uint64 // events received (NOTIFYs, or transactions with inserts for WAL)
	Reconnects    uint64 // successful connects after a lost connection
	Healthy       bool
	LastError     string // the last connection or health-check error; empty if none yet
}

// ErrPooler is wrapped by the error Run returns when the DSN leads to a
// connection pooler instead of PostgreSQL itself.
var ErrPooler = errors.New("listener: connection goes through a pooler")

// reconnectInitial is the first reconnect delay; ReconnectMax caps the rest.
const reconnectInitial = 100 * time.Millisecond

// fatalError marks a connect error that retrying cannot fix; the loop returns
// the wrapped error from Run.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatal(err error) error { return &fatalError{err: err} }

// state is what both sources share: the wake and health signals, the
// counters, and the reconnect loop.
type state struct {
	log *zap.Logger

	wakes chan struct{}
	// queues is the source's queues, replaced whole (never changed in place)
	// when one is added or removed: the hot path, one notification at a
	// time, reads it without a lock.
	queues        atomic.Pointer[map[string]*queueSignal]
	queuesMu      sync.Mutex // serialises replacements of queues
	ready         chan struct{}
	readyOnce     sync.Once
	healthChanges chan struct{}
	healthy       atomic.Bool
	running       atomic.Bool

	events     atomic.Uint64
	reconnects atomic.Uint64

	mu        sync.Mutex
	lastError string
}

// queueSignal is one queue's wake signal and hint.
type queueSignal struct {
	wake chan struct{}
	hint atomic.Int64 // see TakeHint
}

func newState(log *zap.Logger, queues []string) *state {
	s := &state{
		log:           log,
		wakes:         make(chan struct{}, 1),
		ready:         make(chan struct{}),
		healthChanges: make(chan struct{}, 1),
	}
	set := make(map[string]*queueSignal, len(queues))
	for _, q := range queues {
		set[q] = &queueSignal{wake: make(chan struct{}, 1)}
	}
	s.queues.Store(&set)
	return s
}

// queueSet is the source's queues now; never modify it.
func (s *state) queueSet() map[string]*queueSignal { return *s.queues.Load() }

// follows reports whether the source follows queue.
func (s *state) follows(queue string) bool { _, ok := s.queueSet()[queue]; return ok }

// ErrQueueFollowed is wrapped by AddQueue's error for a queue the source
// already follows.
var ErrQueueFollowed = errors.New("listener: queue is already followed")

// ErrQueueNotFollowed is wrapped by RemoveQueue's error for a queue the
// source does not follow.
var ErrQueueNotFollowed = errors.New("listener: queue is not followed")

// addQueue adds queue to the set, with a signal of its own.
func (s *state) addQueue(queue string) error {
	s.queuesMu.Lock()
	defer s.queuesMu.Unlock()
	old := s.queueSet()
	if _, ok := old[queue]; ok {
		return fmt.Errorf("%w: %q", ErrQueueFollowed, queue)
	}
	set := make(map[string]*queueSignal, len(old)+1)
	maps.Copy(set, old)
	set[queue] = &queueSignal{wake: make(chan struct{}, 1)}
	s.queues.Store(&set)
	return nil
}

// removeQueue takes queue out of the set.
func (s *state) removeQueue(queue string) error {
	s.queuesMu.Lock()
	defer s.queuesMu.Unlock()
	old := s.queueSet()
	if _, ok := old[queue]; !ok {
		return fmt.Errorf("%w: %q", ErrQueueNotFollowed, queue)
	}
	set := maps.Clone(old)
	delete(set, queue)
	s.queues.Store(&set)
	return nil
}

// WakesFor is signalled, coalescing, on events of queue and after every
// (re)connect; nil for a queue the source does not follow.
func (s *state) WakesFor(queue string) <-chan struct{} {
	if q, ok := s.queueSet()[queue]; ok {
		return q.wake
	}
	return nil
}

// TakeHint implements Hinter.
func (s *state) TakeHint(queue string) int64 {
	if q, ok := s.queueSet()[queue]; ok {
		return q.hint.Swap(0)
	}
	return 0
}

// wake signals the claimers of every queue without ever blocking: one
// pending wake is enough. Events may have been missed, so no queue's hint
// stands.
func (s *state) wake() {
	set := s.queueSet()
	for _, q := range set {
		q.hint.Store(HintMany)
	}
	signal(s.wakes)
	for _, q := range set {
		signal(q.wake)
	}
}

// wakeQueue signals the claimers of one queue; job, when not 0, is the id
// the event named. The hint is set before the signal, so a claimer that
// receives the signal finds it.
func (s *state) wakeQueue(queue string, job int64) {
	q, ok := s.queueSet()[queue]
	if ok {
		switch {
		case job <= 0:
			q.hint.Store(HintMany)
		case !q.hint.CompareAndSwap(0, job):
			q.hint.Store(HintMany) // a second event before the first was taken
		}
	}
	signal(s.wakes)
	if ok {
		signal(q.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *state) setHealthy(h bool) {
	if s.healthy.Swap(h) != h {
		select {
		case s.healthChanges <- struct{}{}:
		default:
		}
	}
}

func (s *state) setLastError(err error) {
	s.mu.Lock()
	s.lastError = err.Error()
	s.mu.Unlock()
}

func (s *state) stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Notifications: s.events.Load(),
		Reconnects:    s.reconnects.Load(),
		Healthy:       s.healthy.Load(),
		LastError:     s.lastError,
	}
}

// session is one live connection, returned by a successful connect. serve
// reads events until the connection fails or ctx ends, and closes it.
type session func(ctx context.Context) error

// loop connects, serves, and reconnects with exponential backoff until ctx is
// cancelled. connect returns an error wrapped by fatal when retrying cannot
// help; that error is returned from Run.
func (s *state) loop(ctx context.Context, reconnectMax time.Duration, connect func(context.Context) (session, error)) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("listener: Run is already running")
	}
	defer s.running.Store(false)
	defer s.setHealthy(false)

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = reconnectInitial
	bo.MaxInterval = reconnectMax
	bo.MaxElapsedTime = 0 // the default gives up after 15 minutes; a worker never should
	bo.Reset()            // the constructor started from its own 500 ms; start from InitialInterval
	b := backoff.WithContext(bo, ctx)

	var (
		everConnected bool
		lostAt        time.Time
		attempt       int
	)
	for {
		serve, err := connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fe := (*fatalError)(nil); errors.As(err, &fe) {
				s.setLastError(fe.err)
				return fe.err
			}
			s.setLastError(err)
			s.setHealthy(false)
			attempt++
			delay := b.NextBackOff()
			if delay == backoff.Stop {
				return nil
			}
			// An error, not a warning: until it connects, this worker learns
			// of new jobs only from its fast poll.
			s.log.Error("connect failed; retrying",
				zap.Int("attempt", attempt), zap.Duration("next_delay", delay), zap.Error(err))
			if !sleep(ctx, delay) {
				return nil
			}
			continue
		}

		if everConnected {
			s.reconnects.Add(1)
			s.log.Info("reconnected", zap.Duration("gap", time.Since(lostAt)), zap.Int("failed_attempts", attempt))
		}
		everConnected = true
		attempt = 0
		s.setHealthy(true)
		// Wake before Ready closes: whoever waits on Ready finds the catch-up
		// wake already there, and after a reconnect it covers the gap.
		s.wake()
		s.readyOnce.Do(func() { close(s.ready) })

		start := time.Now()
		err = serve(ctx)
		if ctx.Err() != nil {
			return nil
		}
		lostAt = time.Now()
		s.setLastError(err)
		s.setHealthy(false)
		// Reset the backoff only after a session that lasted: a server that
		// accepts connections and drops them at once must not be reconnected
		// to every 100 ms forever.
		if time.Since(start) >= reconnectMax {
			b.Reset()
		}
		delay := b.NextBackOff()
		if delay == backoff.Stop {
			return nil
		}
		s.log.Warn("connection lost; reconnecting", zap.Duration("next_delay", delay), zap.Error(err))
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

// sleep waits d, or returns false as soon as ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
