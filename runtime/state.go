package runtime

import "github.com/fila-run/fila/claimer"

// The values of fila_jobs.state (JobStates lists them in a job's life
// order). They are plain strings because the table is a public interface:
// JobFilter.State, JobRow.State and the rows other programs read hold them
// as text.
const (
	StateHeld      = claimer.StateHeld      // inserted held (InsertOpts.Held); never claimed until Release
	StateWaiting   = claimer.StateWaiting   // for its dependencies or its sequence predecessor (InsertOpts.After, InsertOpts.Sequence); never claimed
	StatePending   = claimer.StatePending   // waiting for its run_at, or runnable now
	StateRunning   = claimer.StateRunning   // claimed; owned by the worker holding its lease
	StateCompleted = claimer.StateCompleted // succeeded; deleted after Config.Retention
	StateDead      = claimer.StateDead      // failed for good: permanent error or no attempt left
	StateCancelled = claimer.StateCancelled // cancelled by an operator, or lost its unique key on a retry
)

// The parts of the pending state a JobFilter may select by name (see
// ListStates); neither is a value of fila_jobs.state.
const (
	StateScheduled = "scheduled" // pending, due later
	StateRetrying  = "retrying"  // pending again after at least one failed attempt
)
