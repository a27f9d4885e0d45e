package runtime

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
)

// What the completer adds per batch of 1 000 outcomes for the events: with
// no subscription (one atomic load), and with one whose reader takes every
// event. Run with -bench Events -benchmem.
func BenchmarkEventsBatch(b *testing.B) {
	const batch = 1000
	ats := make([]*attempt, batch)
	fin := make([]claimer.Finished, batch)
	for i := range ats {
		job := &Job{ID: int64(i), Kind: "noop", Queue: "default", Attempt: 1}
		ats[i] = &attempt{job: job, ran: time.Millisecond, err: errors.New("boom")}
		fin[i] = claimer.Finished{State: StateCompleted}
	}
	emitBatch := func(h *eventHub) {
		if !h.active() {
			return
		}
		now := time.Now()
		evs := make([]Event, 0, batch)
		for i, at := range ats {
			if ev, ok := outcomeEvent(at, fin[i], OutcomeCompleted, now); ok {
				evs = append(evs, ev)
			}
		}
		h.publish(evs...)
	}
	b.Run("no subscription", func(b *testing.B) {
		h := newEventHub(zap.NewNop())
		for b.Loop() {
			emitBatch(h)
		}
	})
	b.Run("one reader", func(b *testing.B) {
		h := newEventHub(zap.NewNop())
		sub, err := h.subscribe(EventFilter{Buffer: 10 * batch})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range sub.ch {
			}
		}()
		for b.Loop() {
			emitBatch(h)
		}
		b.StopTimer()
		h.unsubscribe(sub)
		<-done
	})
}
