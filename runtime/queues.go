package runtime

import (
	"context"
	"fmt"

	"github.com/fila-run/fila/internal/channel"
)

const (
	sqlPauseQueue = `INSERT INTO fila_queues (queue, paused) VALUES ($1::text, true)
ON CONFLICT (queue) DO UPDATE SET paused = true, updated_at = now()`
	// Resuming flips the flag; the table's trigger wakes the queue's
	// workers in the same commit.
	sqlResumeQueue  = `UPDATE fila_queues SET paused = false, updated_at = now() WHERE queue = $1::text AND paused`
	sqlPausedQueues = `SELECT coalesce(array_agg(queue ORDER BY queue), '{}') FROM fila_queues WHERE paused`

	// A queue is in use once a worker has served it (fila_kinds keeps
	// every queue and kind a worker registered), a job is pending or
	// running in it, a recurring task enqueues into it, or it was paused
	// before. Each probe reads an index or a small table.
	sqlQueueInUse = `SELECT EXISTS (SELECT 1 FROM fila_kinds WHERE queue = $1::text)
    OR EXISTS (SELECT 1 FROM fila_queues WHERE queue = $1::text)
    OR EXISTS (SELECT 1 FROM fila_recurring WHERE queue = $1::text)
    OR EXISTS (SELECT 1 FROM fila_jobs WHERE state = 'pending' AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM fila_jobs WHERE state = 'running' AND queue = $1::text)`

	sqlKnownQueues = `SELECT coalesce(array_agg(q ORDER BY q), '{}') FROM (
    SELECT queue FROM fila_kinds UNION SELECT queue FROM fila_queues UNION SELECT queue FROM fila_recurring) AS k(q)`
)

// QueueInUse reports whether queue has been used: a worker has served it,
// a job is pending or running in it, a recurring task enqueues into it, or
// it was paused before. A name for which none holds is likely misspelt:
// `fila queue pause` refuses it without --force.
func QueueInUse(ctx context.Context, db DB, queue string) (bool, error) {
	if err := channel.ValidateQueue(queue); err != nil {
		return false, err
	}
	var used bool
	if err := db.QueryRow(ctx, sqlQueueInUse, queue).Scan(&used); err != nil {
		return false, fmt.Errorf("look up queue %q: %w", queue, err)
	}
	return used, nil
}

// KnownQueues lists the queues workers have served, recurring tasks
// enqueue into, or that were ever paused, in name order.
func KnownQueues(ctx context.Context, db DB) ([]string, error) {
	var qs []string
	if err := db.QueryRow(ctx, sqlKnownQueues).Scan(&qs); err != nil {
		return nil, fmt.Errorf("list known queues: %w", err)
	}
	return qs, nil
}

// PauseQueue pauses queue: from the next claim of every worker (at most one
// wake-up away), none of its jobs starts; they stay pending, and running
// ones finish. db may be the caller's transaction. Any valid name may be
// paused, also ahead of its first job; QueueInUse tells a misspelt one.
func PauseQueue(ctx context.Context, db DB, queue string) error {
	if err := channel.ValidateQueue(queue); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	if _, err := db.Exec(ctx, sqlPauseQueue, queue); err != nil {
		return fmt.Errorf("pause queue %q: %w", queue, err)
	}
	return nil
}

// ResumeQueue resumes a paused queue and wakes its workers at once. It
// reports whether the queue was paused.
func ResumeQueue(ctx context.Context, db DB, queue string) (bool, error) {
	if err := channel.ValidateQueue(queue); err != nil {
		return false, fmt.Errorf("resume: %w", err)
	}
	tag, err := db.Exec(ctx, sqlResumeQueue, queue)
	if err != nil {
		return false, fmt.Errorf("resume queue %q: %w", queue, err)
	}
	return tag.RowsAffected() > 0, nil
}

// PausedQueues lists the paused queues.
func PausedQueues(ctx context.Context, db DB) ([]string, error) {
	var qs []string
	if err := db.QueryRow(ctx, sqlPausedQueues).Scan(&qs); err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	return qs, nil
}
