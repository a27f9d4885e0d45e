package filatest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fila-run/fila/runtime"
)

// Subscribe subscribes to rt's events for t (see runtime.Runtime.Subscribe)
// and closes the subscription when t ends. Subscribe before inserting the
// jobs whose events the test waits for: events are sent from the
// subscription on, never replayed.
func Subscribe(t testing.TB, rt *runtime.Runtime, f runtime.EventFilter) *runtime.Subscription {
	t.Helper()
	sub, err := rt.Subscribe(f)
	if err != nil {
		t.Fatalf("filatest: %v", err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// WaitForEvent reads sub's events until one satisfies match, and returns
// it, instead of polling the job's row: the row is already as the event
// says. The events read before it are consumed. It fails t if none comes
// within timeout, or the subscription closes first, naming the events it
// read meanwhile.
func WaitForEvent(t testing.TB, sub *runtime.Subscription, timeout time.Duration, match func(runtime.Event) bool) runtime.Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatalf("filatest: subscription closed before the event waited for; read meanwhile: %s", list(seen))
				return runtime.Event{}
			}
			if match(ev) {
				return ev
			}
			seen = append(seen, describe(ev))
		case <-deadline.C:
			t.Fatalf("filatest: no event as waited for within %s; read meanwhile: %s (dropped: %d)", timeout, list(seen), sub.Dropped())
			return runtime.Event{}
		}
	}
}

// JobEvent matches an event of kind about the job id.
func JobEvent(kind runtime.EventKind, id int64) func(runtime.Event) bool {
	return func(ev runtime.Event) bool { return ev.Kind == kind && ev.Job != nil && ev.Job.ID == id }
}

// QueueEvent matches an event of kind about queue itself (paused, resumed).
func QueueEvent(kind runtime.EventKind, queue string) func(runtime.Event) bool {
	return func(ev runtime.Event) bool { return ev.Kind == kind && ev.Job == nil && ev.Queue == queue }
}

// describe names ev in a failure message.
func describe(ev runtime.Event) string {
	if ev.Job == nil {
		return fmt.Sprintf("%s of queue %q", ev.Kind, ev.Queue)
	}
	return fmt.Sprintf("%s of job %d (%s)", ev.Kind, ev.Job.ID, ev.Job.Kind)
}

// list joins the first events read, and says how many more there were.
func list(seen []string) string {
	const show = 20
	if len(seen) == 0 {
		return "none"
	}
	if len(seen) > show {
		return fmt.Sprintf("%s and %d more", strings.Join(seen[:show], ", "), len(seen)-show)
	}
	return strings.Join(seen, ", ")
}
