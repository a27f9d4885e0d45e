package ui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/runtime"
)

// overview is what the overview page shows.
type overview struct {
	At      time.Time
	Queues  []queueRow
	Dead    []deadKind
	Workers []workerRow
	// GoneWorkers counts workers that stopped reporting without a clean stop.
	GoneWorkers int
	Recurring   []runtime.RecurringTaskState
	Completed   int64
	// CompletedEstimate is true when Completed comes from table statistics.
	CompletedEstimate      bool
	Cancelled              int64
	NotificationQueueUsage float64
	Warnings               []string
	Charts                 charts
	// OldestQueue is the queue whose oldest runnable job has waited
	// longest, OldestRunnable how long; "" when nothing is runnable.
	// Paused queues are left out: PausedWaiting lists those with runnable
	// jobs.
	OldestQueue    string
	OldestRunnable time.Duration
	PausedWaiting  []queueRow
}

// queueRow is one queue's depth per state.
type queueRow struct {
	Queue                string
	Paused               bool
	Runnable, Scheduled  int64
	Running, Expired     int64
	Waiting, Blocked     int64
	OldestRunnable       time.Duration
	HasRunnable, HasWork bool
}

// deadKind is the dead jobs of one kind, with the most recent error.
type deadKind struct {
	Kind      string
	Dead      int64
	LastError string
}

// workerRow is one live worker and its wake source.
type workerRow struct {
	ID, Host   string
	PID        int
	Queues     []string
	Mode       string
	WakeSource string
	WakeError  string
	LastSeen   time.Duration
}

// readOverview reads the overview: queue depths, dead jobs per kind, the
// workers and warnings from internal/stats, which reads fila_jobs through
// its partial indexes only; paused queues and recurring tasks from their
// own small tables; the charts from fila_minutes.
func readOverview(ctx context.Context, pool *pgxpool.Pool) (*overview, error) {
	s, err := stats.Collect(ctx, pool)
	if err != nil {
		return nil, err
	}
	paused, err := runtime.PausedQueues(ctx, pool)
	if err != nil {
		return nil, err
	}
	recurring, err := runtime.RecurringTasks(ctx, pool)
	if err != nil {
		return nil, err
	}
	o := &overview{At: s.At, Recurring: recurring, NotificationQueueUsage: s.NotificationQueueUsage,
		Completed: s.Completed.Jobs, CompletedEstimate: s.Completed.Estimate, Cancelled: s.Cancelled,
		GoneWorkers: s.GoneWorkers, Warnings: slices.Clone(s.Warnings)}
	for _, b := range s.Blocked {
		o.Warnings = append(o.Warnings, fmt.Sprintf("sequence %s is blocked: job %d waits behind dead job %d (retry or delete it to go on)",
			b.Sequence, b.NextJob, b.DeadJob))
	}
	byName := map[string]*queueRow{}
	row := func(name string) *queueRow {
		q := byName[name]
		if q == nil {
			q = &queueRow{Queue: name}
			byName[name] = q
		}
		return q
	}
	for _, sq := range s.Queues {
		q := row(sq.Queue)
		q.Runnable, q.Scheduled, q.Running, q.Expired = sq.Runnable, sq.Scheduled, sq.Running, sq.ExpiredLeases
		q.Waiting, q.Blocked = sq.Waiting, sq.Blocked
		q.OldestRunnable = time.Duration(sq.OldestRunnableSeconds * float64(time.Second))
		if sq.ExpiredLeases > 0 {
			o.Warnings = append(o.Warnings, fmt.Sprintf("queue %s: %d running jobs are past their lease (their worker died or stalled); the next claim rescues them",
				sq.Queue, sq.ExpiredLeases))
		}
	}
	for _, name := range paused {
		row(name).Paused = true
	}
	for _, w := range s.Workers {
		o.Workers = append(o.Workers, workerRow{ID: w.ID, Host: w.Host, PID: w.PID, Queues: w.Queues, Mode: w.Mode,
			WakeSource: w.WakeSource, WakeError: w.WakeError, LastSeen: time.Duration(w.LastSeenSeconds * float64(time.Second))})
		for _, name := range w.Queues {
			row(name)
		}
	}
	for _, q := range byName {
		q.HasRunnable = q.Runnable > 0
		q.HasWork = q.Runnable+q.Scheduled+q.Running+q.Waiting > 0
		o.Queues = append(o.Queues, *q)
	}
	slices.SortFunc(o.Queues, func(a, b queueRow) int { return strings.Compare(a.Queue, b.Queue) })
	for _, q := range o.Queues {
		if q.Paused && q.HasRunnable {
			o.PausedWaiting = append(o.PausedWaiting, q)
		}
	}
	for _, d := range s.Dead {
		o.Dead = append(o.Dead, deadKind{Kind: d.Kind, Dead: d.Dead, LastError: d.LastError})
	}
	if q, secs := s.OldestRunnable(); q != "" {
		o.OldestQueue, o.OldestRunnable = q, time.Duration(secs*float64(time.Second))
	}
	mins, err := readMinutes(ctx, pool, s.At)
	if err != nil {
		return nil, err
	}
	o.Charts = drawCharts(mins, s.At)
	return o, nil
}
