package claimer

// The values of fila_jobs.state, in a job's life order. The table is a
// public interface (any language inserts and reads it), so these strings are
// part of the contract; Go code names them here rather than spelling them
// out. SQL keeps its literals: a statement reads better with 'pending' in it
// than with a parameter.
const (
	StateHeld      = "held"      // inserted held; never claimed until released to pending
	StateWaiting   = "waiting"   // for its dependencies or its sequence predecessor; never claimed
	StatePending   = "pending"   // waiting for its run_at, or runnable now
	StateRunning   = "running"   // claimed; owned by the worker holding its lease
	StateCompleted = "completed" // succeeded; deleted after the retention period
	StateDead      = "dead"      // failed for good: permanent error or no attempt left
	StateCancelled = "cancelled" // cancelled by an operator, or lost its unique key on a retry
)
