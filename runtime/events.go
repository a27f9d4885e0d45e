package runtime

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
)

// EventKind says what an Event reports.
type EventKind string

// Event kinds. The job events are sent once the outcome is durable: a
// subscriber that reads the job's row on "completed" finds it completed.
// An attempt whose lease was lost, whose outcome was refused as no longer
// this worker's, or that a shutdown gave back gives none: its job runs
// again, and the attempt that ends it gives the event.
const (
	EventCompleted EventKind = "completed" // the attempt succeeded (also when completed in the handler's transaction)
	EventRetried   EventKind = "retried"   // the attempt failed; the job is pending again, due at RunAt
	EventDead      EventKind = "dead"      // the attempt failed for good: permanent, or no attempt left
	EventCancelled EventKind = "cancelled" // cancelled while it ran, or not retried because another job holds its unique key
	EventSnoozed   EventKind = "snoozed"   // the handler asked to run later (Snooze): pending again, due at RunAt
	// EventQueuePaused and EventQueueResumed report a change of a queue's
	// pause (PauseQueue, ResumeQueue, `fila queue pause`), by any process,
	// as this runtime's safety poll finds it: within SafetyPoll of the
	// change (the poll's interval in ModePoll). A queue found paused by the
	// runtime's first poll gives an EventQueuePaused too.
	EventQueuePaused  EventKind = "queue_paused"
	EventQueueResumed EventKind = "queue_resumed"
)

// eventKinds are the kinds an EventFilter may name.
var eventKinds = []EventKind{EventCompleted, EventRetried, EventDead, EventCancelled, EventSnoozed,
	EventQueuePaused, EventQueueResumed}

// Event is something that happened to a job this runtime ran, or to one of
// its queues.
type Event struct {
	Kind EventKind
	// Queue is the job's queue, or the queue paused or resumed.
	Queue string
	// Job is the attempt as its handler saw it (ID, Kind, Attempt, Payload…);
	// nil for a queue event. It is shared by every subscriber: read it,
	// never change it.
	Job *Job
	// Error is the attempt's error text for EventRetried, EventDead and a
	// unique-key EventCancelled; what the stopped handler returned, if
	// anything, for a cancellation while it ran.
	Error string
	// Ran is how long the attempt's handler ran.
	Ran time.Duration
	// At is when the runtime learned the outcome was written (or found the
	// queue's change), on this process's clock.
	At time.Time
	// RunAt is when the job runs again, for EventRetried and EventSnoozed
	// (on this process's clock, from the database's delay); zero otherwise.
	RunAt time.Time
}

// Bounds of EventFilter.Buffer.
const (
	EventBufferDefault = 1000
	EventBufferMax     = 100_000
)

// EventFilter selects the events a Subscription receives. Each empty list
// lets everything through.
type EventFilter struct {
	// Kinds are the event kinds to receive. Defaults to every kind.
	Kinds []EventKind
	// JobKinds are the job kinds whose job events to receive; queue events
	// are not filtered by it. Defaults to every job kind.
	JobKinds []string
	// Queues are the queues whose events, of jobs or of the queue itself, to
	// receive. Defaults to every queue.
	Queues []string
	// Buffer is how many events wait for the reader before further ones
	// are dropped (and counted in Dropped): a slow reader never holds up
	// the workers. Allowed 1 to EventBufferMax. Defaults to
	// EventBufferDefault.
	Buffer int
}

// validate returns an error naming what f gets wrong.
func (f EventFilter) validate() error {
	for _, k := range f.Kinds {
		if !slices.Contains(eventKinds, k) {
			return fmt.Errorf("EventFilter.Kinds: unknown event kind %q: use one of %v", k, eventKinds)
		}
	}
	for _, k := range f.JobKinds {
		if err := ValidateKind(k); err != nil {
			return fmt.Errorf("EventFilter.JobKinds: %w", err)
		}
	}
	for _, q := range f.Queues {
		if err := channel.ValidateQueue(q); err != nil {
			return fmt.Errorf("EventFilter.Queues: %w", err)
		}
	}
	if f.Buffer < 1 || f.Buffer > EventBufferMax {
		return fmt.Errorf("EventFilter.Buffer %d out of range: allowed 1 to %d", f.Buffer, EventBufferMax)
	}
	return nil
}

// matches says whether f lets ev through.
func (f *EventFilter) matches(ev *Event) bool {
	if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, ev.Kind) {
		return false
	}
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, ev.Queue) {
		return false
	}
	if len(f.JobKinds) > 0 && ev.Job != nil && !slices.Contains(f.JobKinds, ev.Job.Kind) {
		return false
	}
	return true
}

// Subscription receives a runtime's events (see Runtime.Subscribe).
type Subscription struct {
	id     int
	hub    *eventHub
	filter EventFilter
	ch     chan Event
	closed bool // guarded by hub.mu

	dropped  atomic.Uint64
	dropping atomic.Bool // in a burst of drops, already logged
}

// Subscribe returns a subscription to the events f selects, sent from now
// on, until its Close or the end of Run, which close its channel. Events
// are never sent before their outcome is written, and never wait for the
// reader: beyond f.Buffer unread events, further ones are dropped and
// counted (Dropped), and a warning is logged once per burst of drops. It
// may be called before Run; after Run has returned it fails with an error
// wrapping ErrClosed. With no subscription, emitting costs the workers one
// atomic load per batch of outcomes.
func (r *Runtime) Subscribe(f EventFilter) (*Subscription, error) {
	if f.Buffer == 0 {
		f.Buffer = EventBufferDefault
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	f.Kinds, f.JobKinds, f.Queues = slices.Clone(f.Kinds), slices.Clone(f.JobKinds), slices.Clone(f.Queues)
	return r.events.subscribe(f)
}

// Events is the channel the subscription's events come on. It is closed by
// Close and when Run returns.
func (s *Subscription) Events() <-chan Event { return s.ch }

// Dropped counts the events dropped so far because the buffer was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes its channel; events already in
// it may still be read. Calling it again does nothing.
func (s *Subscription) Close() { s.hub.unsubscribe(s) }

// deliver sends ev without waiting. Called with hub.mu read-locked.
func (s *Subscription) deliver(ev *Event) {
	if !s.filter.matches(ev) {
		return
	}
	select {
	case s.ch <- *ev:
		if s.dropping.Load() {
			s.dropping.Store(false)
		}
	default:
		n := s.dropped.Add(1)
		if s.dropping.CompareAndSwap(false, true) {
			s.hub.log.Warn("event subscription's buffer is full; dropping its events until its reader catches up",
				zap.Int("subscription", s.id), zap.Int("buffer", cap(s.ch)), zap.Uint64("dropped_total", n))
		}
	}
}

// eventHub holds a runtime's subscriptions.
type eventHub struct {
	log *zap.Logger
	// any is set while some subscription is open: the only thing the hot
	// path looks at when none is.
	any atomic.Bool

	mu     sync.RWMutex
	subs   []*Subscription
	nextID int
	closed bool // Run returned
}

func newEventHub(log *zap.Logger) *eventHub { return &eventHub{log: log.Named("events")} }

// active says whether an event would reach anyone.
func (h *eventHub) active() bool { return h.any.Load() }

func (h *eventHub) subscribe(f EventFilter) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("subscribe: %w", ErrClosed)
	}
	h.nextID++
	s := &Subscription{id: h.nextID, hub: h, filter: f, ch: make(chan Event, f.Buffer)}
	h.subs = append(h.subs, s)
	h.any.Store(true)
	return s, nil
}

func (h *eventHub) unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.ch)
	h.subs = slices.DeleteFunc(h.subs, func(o *Subscription) bool { return o == s })
	h.any.Store(len(h.subs) > 0)
}

// close closes every subscription, when Run returns; later Subscribe calls
// fail.
func (h *eventHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, s := range h.subs {
		s.closed = true
		close(s.ch)
	}
	h.subs = nil
	h.any.Store(false)
}

// publish sends evs to every subscription that wants them.
func (h *eventHub) publish(evs ...Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i := range evs {
		for _, s := range h.subs {
			s.deliver(&evs[i])
		}
	}
}
