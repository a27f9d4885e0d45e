// Package runtime is Fila's public entry: configuration, the handler registry,
// Run and Stop, and the insert API (also inside a caller's pgx.Tx, or its
// *sql.Tx wrapped by SQL).
//
// A job is a row of fila_jobs. An insert trigger notifies a channel per queue
// with the job id; a dedicated listener connection wakes the claimers; one
// statement claims a batch with FOR UPDATE SKIP LOCKED; handlers run in a
// bounded pool while heartbeats keep their leases; outcomes are written in
// batches, fenced on the attempt. A slow safety poll and a timer for the next
// scheduled run_at catch whatever no notification announced.
//
// Delivery is at least once: a worker can die after a handler's side effect
// and before its completion is written. Job.IdempotencyKey gives handlers a
// stable key for external effects, and CompleteTx completes a job inside the
// handler's own transaction when the effect lives in the same database.
//
// A program learns what its workers did from Runtime.Subscribe, a bounded
// channel of events sent once each outcome is written (completed, retried,
// dead, cancelled, snoozed, queue paused or resumed); Config.ErrorHandler
// is told of each failed attempt, a panic's value and stack included, and
// Config.StuckJobHandler of each attempt that runs past Config.StuckAfter.
//
// The package shares its name with the standard library's runtime; import the
// standard one as goruntime where both are needed.
package runtime
