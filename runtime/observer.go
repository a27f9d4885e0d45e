package runtime

import "time"

// WakeReason says what made a producer claim.
type WakeReason string

// Wake reasons.
const (
	WakeNotify WakeReason = "notify" // a NOTIFY of the queue's channel
	WakeWAL    WakeReason = "wal"    // an insert or update seen in logical replication
	WakePoll   WakeReason = "poll"   // the safety poll, the fast poll while the wake source is down, or ModePoll's interval
	WakeTimer  WakeReason = "timer"  // the timer for the next scheduled job or lease expiry
	WakeSlot   WakeReason = "slot"   // a handler finished while work was left
)

// Outcome is how one attempt ended, as an Observer sees it.
type Outcome string

// Outcomes.
const (
	OutcomeCompleted Outcome = "completed"  // succeeded (also when completed in the handler's transaction)
	OutcomeRetried   Outcome = "retried"    // failed, pending again after its backoff
	OutcomeDead      Outcome = "dead"       // failed for good: permanent, or no attempt left
	OutcomeCancelled Outcome = "cancelled"  // cancelled by an operator while it ran
	OutcomeLeaseLost Outcome = "lease_lost" // its lease was lost; its result was discarded
	OutcomeReleased  Outcome = "released"   // interrupted by a hard stop and given back, not counted
	OutcomeFenced    Outcome = "fenced"     // its outcome was refused: the attempt was no longer this worker's
	OutcomeSnoozed   Outcome = "snoozed"    // the handler asked to run later (Snooze): pending again, its attempt given back
)

// Observer receives what a runtime does, for metrics. Its methods are called
// from the runtime's goroutines, on the hot path: they must return at once.
// Package metrics implements it for Prometheus.
type Observer interface {
	// Woken is called each time a producer claims, with why.
	Woken(queue string, reason WakeReason)
	// Claimed is called after each claim statement with the jobs it took
	// (none when it found nothing) and how many expired leases it rescued.
	// Each job's Wait is its pickup latency on the database clock.
	Claimed(queue string, jobs []*Job, rescued int)
	// Finished is called once per attempt when its end is known: ran is how
	// long its handler ran (for a fenced outcome too: the handler returned,
	// but its result was refused).
	Finished(job *Job, outcome Outcome, ran time.Duration)
}

// nopObserver is the Observer of a runtime without one.
type nopObserver struct{}

func (nopObserver) Woken(string, WakeReason)              {}
func (nopObserver) Claimed(string, []*Job, int)           {}
func (nopObserver) Finished(*Job, Outcome, time.Duration) {}
