package runtime

// Which jobs an operator may retry, cancel or delete. Retry, Cancel and
// Delete (and their Where forms) apply these rules in SQL; the command line
// and the dashboard ask here before offering an action or accepting a
// --state, so a button or a flag offers exactly what the function does.

// CanRetry reports whether Retry puts a job in state back to pending: dead
// and cancelled jobs. A running job is cancelled first; a completed one is
// not run again.
func CanRetry(state string) bool { return state == StateDead || state == StateCancelled }

// CanCancel reports whether Cancel cancels a job in state: waiting,
// pending and running jobs. Finished ones stay as they are.
func CanCancel(state string) bool {
	return state == StateWaiting || state == StatePending || state == StateRunning
}

// CanDelete reports whether Delete deletes a job in state: every state but
// running, whose worker still owns the job (cancel it first).
func CanDelete(state string) bool { return state != StateRunning }

// RetryStates returns what RetryWhere's JobFilter.State may be: dead (the
// default) or cancelled.
func RetryStates() []string { return []string{StateDead, StateCancelled} }

// CancelStates returns what CancelWhere's JobFilter.State may be: waiting,
// pending, running, and the parts of pending, scheduled and retrying.
func CancelStates() []string {
	return []string{StateWaiting, StatePending, StateRunning, StateScheduled, StateRetrying}
}

// DeleteStates returns what DeleteWhere's JobFilter.State may be: dead,
// cancelled, waiting, pending, scheduled and retrying. Running jobs are
// cancelled first; completed ones go by retention (Config.Retention), or
// by id.
func DeleteStates() []string {
	return []string{StateDead, StateCancelled, StateWaiting, StatePending, StateScheduled, StateRetrying}
}
