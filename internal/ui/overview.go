package ui

import (
	"context"
	"fmt"
	"slices"
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
}

// queueRow is one queue's depth per state.
type queueRow struct {
	Queue                string
	Paused               bool
	Runnable, Scheduled  int64
	Running, Expired     int64
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

// readOverview reads the overview: queue depths from internal/stats, which
// reads fila_jobs through its partial indexes; paused queues, workers and
// recurring tasks from their own small tables; the charts from
// fila_minutes.
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
	o := &overview{At: s.At, Recurring: recurring, NotificationQueueUsage: s.NotificationQueueUsage}
	byName := map[string]*queueRow{}
	row := func(name string) *queueRow {
		q := byName[name]
		if q == nil {
			q = &queueRow{Queue: name}
			byName[name] = q
		}
		return q
	}
	for _, st := range s.States {
		q := row(st.Queue)
		switch st.State {
		case "running":
			q.Running = st.Jobs
		case "completed":
			o.Completed += st.Jobs
		case "cancelled":
			o.Cancelled += st.Jobs
		}
	}
	for _, l := range s.Lag {
		q := row(l.Queue)
		q.Runnable, q.Scheduled = l.Runnable, l.Scheduled
		q.OldestRunnable = time.Duration(l.OldestAgeSecond * float64(time.Second))
	}
	for _, name := range paused {
		row(name).Paused = true
	}
	workers, gone, err := readWorkers(ctx, pool)
	if err != nil {
		return nil, err
	}
	o.Workers, o.GoneWorkers = workers, gone
	for _, w := range workers {
		for _, name := range w.Queues {
			row(name)
		}
		if w.WakeSource == "down" {
			o.Warnings = append(o.Warnings, fmt.Sprintf("worker %s (%s, pid %d): its %s wake source is down (%s); it finds new jobs only by polling",
				w.ID, w.Host, w.PID, w.Mode, w.WakeError))
		}
	}
	if s.ExpiredLeases > 0 {
		o.Warnings = append(o.Warnings, fmt.Sprintf("%d running jobs are past their lease: their worker died or stalled, and the next claim rescues them", s.ExpiredLeases))
	}
	for _, q := range byName {
		q.HasRunnable = q.Runnable > 0
		q.HasWork = q.Runnable+q.Scheduled+q.Running > 0
		o.Queues = append(o.Queues, *q)
	}
	slices.SortFunc(o.Queues, func(a, b queueRow) int {
		switch {
		case a.Queue < b.Queue:
			return -1
		case a.Queue > b.Queue:
			return 1
		}
		return 0
	})
	for _, d := range s.Dead {
		o.Dead = append(o.Dead, deadKind{Kind: d.Kind, Dead: d.Dead, LastError: d.LastError})
	}
	mins, err := readMinutes(ctx, pool, s.At)
	if err != nil {
		return nil, err
	}
	o.Charts = drawCharts(mins, s.At)
	return o, nil
}

// workersSQL reads fila_workers, a row per running worker process.
const workersSQL = `SELECT id, host, pid, queues, mode, wake_source, coalesce(wake_error, ''),
       extract(epoch FROM now() - last_seen_at)::float8
FROM fila_workers ORDER BY host, pid, id`

// workerGoneAfter is how long a worker row may go without an update before
// the worker counts as gone: a live one writes it at least every 5 minutes.
const workerGoneAfter = 15 * time.Minute

func readWorkers(ctx context.Context, pool *pgxpool.Pool) ([]workerRow, int, error) {
	rows, err := pool.Query(ctx, workersSQL)
	if err != nil {
		return nil, 0, fmt.Errorf("read workers: %w", err)
	}
	defer rows.Close()
	var live []workerRow
	gone := 0
	for rows.Next() {
		var w workerRow
		var seen float64
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &w.Queues, &w.Mode, &w.WakeSource, &w.WakeError, &seen); err != nil {
			return nil, 0, fmt.Errorf("read workers: %w", err)
		}
		w.LastSeen = time.Duration(seen * float64(time.Second))
		if w.LastSeen > workerGoneAfter {
			gone++
			continue
		}
		live = append(live, w)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read workers: %w", err)
	}
	return live, gone, nil
}
