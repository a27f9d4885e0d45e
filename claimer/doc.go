// Package claimer holds Fila's hot path in SQL: the claim of a batch of jobs
// with FOR UPDATE SKIP LOCKED, and the fenced, batched writes that follow it
// (outcomes, heartbeats, releases, retention).
//
// It is a building block that package runtime wires together; its API is not
// stable. Every statement after the claim is fenced on (id, attempt,
// state = 'running'), so a worker whose lease was rescued cannot overwrite the
// result of the worker that owns the job now.
package claimer
