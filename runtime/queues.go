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
)

// PauseQueue pauses queue: from the next claim of every worker (at most one
// wake-up away), none of its jobs starts; they stay pending, and running
// ones finish. db may be the caller's transaction.
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
