package runtime

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/stats"
)

// QueueDB is what ListQueues and DescribeQueue read from: a pool or a
// connection (not a transaction: the snapshot is read in one read-only
// transaction of its own, so that its numbers agree with each other).
type QueueDB interface {
	DB
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// QueueInfo is one queue as ListQueues describes it: what `fila stats`
// reads per queue, and the queue's name even when it holds no job.
type QueueInfo struct {
	Name string `json:"name"`
	// Paused is true while the queue is paused (PauseQueue); PausedSeconds
	// is how long ago it was paused.
	Paused        bool    `json:"paused"`
	PausedSeconds float64 `json:"paused_seconds,omitempty"`
	// Counts by state. Runnable and Scheduled are the pending jobs due now
	// and due later; Waiting, the jobs waiting for their flow, Blocked
	// those of them behind a dead job of their sequence; Held, the jobs
	// inserted held, until released; ExpiredLeases,
	// running jobs whose worker died or stalled. Completed and cancelled
	// jobs are not counted per queue: that would read the history, which
	// no index holds by queue.
	Runnable      int64 `json:"runnable"`
	Scheduled     int64 `json:"scheduled"`
	Running       int64 `json:"running"`
	ExpiredLeases int64 `json:"expired_leases"`
	Waiting       int64 `json:"waiting"`
	Blocked       int64 `json:"blocked"`
	Held          int64 `json:"held"`
	Dead          int64 `json:"dead"`
	// OldestRunnableSeconds is how long the oldest runnable job has waited
	// since its run_at; 0 when none is runnable.
	OldestRunnableSeconds float64 `json:"oldest_runnable_seconds"`
}

// ListQueues describes every queue: those with jobs that are not finished
// or are dead, and those KnownQueues names (served by a worker, used by a
// recurring task, or ever paused), in name order. It reads the snapshot
// `fila stats` reads (one read-only transaction, through the table's
// partial indexes), so its cost follows the backlog, not the history.
func ListQueues(ctx context.Context, db QueueDB) ([]QueueInfo, error) {
	snap, err := stats.Collect(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	known, err := KnownQueues(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	byName := map[string]*QueueInfo{}
	get := func(name string) *QueueInfo {
		if q, ok := byName[name]; ok {
			return q
		}
		q := &QueueInfo{Name: name}
		byName[name] = q
		return q
	}
	for _, name := range known {
		get(name)
	}
	for _, s := range snap.Queues {
		q := get(s.Queue)
		q.Paused, q.PausedSeconds = s.Paused, s.PausedSeconds
		q.Runnable, q.Scheduled, q.Running, q.ExpiredLeases = s.Runnable, s.Scheduled, s.Running, s.ExpiredLeases
		q.Waiting, q.Blocked, q.OldestRunnableSeconds = s.Waiting, s.Blocked, s.OldestRunnableSeconds
		q.Held = s.Held
	}
	for _, d := range snap.DeadByQueue {
		get(d.Queue).Dead = d.Dead
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// DescribeQueue describes one queue as ListQueues does. A valid name that
// no job, worker or pause has used is described with zero counts: jobs
// may be enqueued into any queue. An invalid name is an error.
func DescribeQueue(ctx context.Context, db QueueDB, name string) (QueueInfo, error) {
	if err := channel.ValidateQueue(name); err != nil {
		return QueueInfo{}, fmt.Errorf("describe queue: %w", err)
	}
	qs, err := ListQueues(ctx, db)
	if err != nil {
		return QueueInfo{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
	}
	return QueueInfo{Name: name}, nil
}
