// Package claimer is Fila's store: every statement of the hot path on the
// jobs table. Store claims a batch of jobs with FOR UPDATE SKIP LOCKED (or
// one job by id), writes outcomes, extends leases by heartbeats, releases
// attempts a stopping worker gives back, and deletes finished jobs past
// their retention; Writer batches outcomes for it, group-commit style. The
// values of fila_jobs.state are named in state.go.
//
// It is a building block that package runtime wires together; its API is not
// stable. Every statement after the claim is fenced on the attempt: it
// changes a row only if state = 'running' and its attempts and started_at
// are the attempt's, so a worker whose lease was rescued cannot overwrite the
// result of the worker that owns the job now.
package claimer
