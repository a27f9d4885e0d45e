package runtime

// Which jobs an operator may retry, cancel or delete. Retry, Cancel and
// Delete (and their Where forms) apply these rules in SQL; the command line
// and the dashboard ask here before offering an action or accepting a
// --state, so a button or a flag offers exactly what the function does.

// CanRetry reports whether Retry puts a job in state back to pending:
// dead, cancelled and completed jobs (a completed job of a sequence or a
// batch is refused, with the reason). A running job is cancelled first. A
// pending job is retried when it is due later (made due now): CanRetryJob
// tells from its run_at.
func CanRetry(state string) bool {
	return state == StateDead || state == StateCancelled || state == StateCompleted
}

// CanRetryJob reports whether Retry changes job j, as far as its row
// tells: CanRetry of its state, or a pending job due later than j.Now.
func CanRetryJob(j JobRow) bool {
	return CanRetry(j.State) || (j.State == StatePending && j.RunAt.After(j.Now))
}

// CanCancel reports whether Cancel cancels a job in state: held, waiting,
// pending and running jobs. Finished ones stay as they are.
func CanCancel(state string) bool {
	return state == StateHeld || state == StateWaiting || state == StatePending || state == StateRunning
}

// CanDelete reports whether Delete deletes a job in state: every state but
// running, whose worker still owns the job (cancel it first).
func CanDelete(state string) bool { return state != StateRunning }

// RetryStates returns what RetryWhere's JobFilter.State may be: dead (the
// default), cancelled, completed, or scheduled (pending, due later: made
// due now).
func RetryStates() []string {
	return []string{StateDead, StateCancelled, StateCompleted, StateScheduled}
}

// CancelStates returns what CancelWhere's JobFilter.State may be: held,
// waiting, pending, running, and the parts of pending, scheduled and
// retrying.
func CancelStates() []string {
	return []string{StateHeld, StateWaiting, StatePending, StateRunning, StateScheduled, StateRetrying}
}

// DeleteStates returns what DeleteWhere's JobFilter.State may be: dead,
// cancelled, held, waiting, pending, scheduled and retrying. Running jobs are
// cancelled first; completed ones go by retention (Config.Retention), or
// by id.
func DeleteStates() []string {
	return []string{StateDead, StateCancelled, StateHeld, StateWaiting, StatePending, StateScheduled, StateRetrying}
}
