// Package stats reads what operators watch on a queue straight from the jobs
// table, cheaply enough to ask every few seconds however much history the
// table holds: depth per queue and state, how long the oldest runnable job
// has waited (the delay users feel), dead jobs per kind, throughput and run
// time of recent completions, the workers and their wake sources, and how
// full PostgreSQL's notification queue is.
//
// Every statement reads fila_jobs through a partial index, so its cost
// follows the backlog (pending and running rows), the dead and cancelled
// rows, or a bounded window of recent completions, never the history.
// Counts are exact except the completed rows, which an exact count would
// have to read one by one: past CompletedExactUpTo they are an estimate from
// the table's statistics, and say so.
//
// `fila stats` prints a Snapshot; metrics and dashboards read the same one.
package stats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fila-run/fila/migrations"
)

// DB is what Collect reads from: a pool or a connection. A snapshot is read
// in one read-only, repeatable-read transaction, so its numbers agree with
// each other and with one now().
type DB interface {
	migrations.Querier
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// CompletedExactUpTo is how many completed rows are counted one by one;
// above it the count is an estimate (Completed.Estimate), and when the
// estimate is above four times as many, nothing is counted at all.
const CompletedExactUpTo = 10_000

// WorkerGoneAfter is how long a worker's row may go without an update before
// the worker counts as gone: a live one writes it at least every 5 minutes.
const WorkerGoneAfter = 15 * time.Minute

// Window bounds the sample of recent completions that throughput and run
// times are computed from: the newest Jobs completions, and only those
// finished within Age. Whichever bound is reached first decides the span.
type Window struct {
	Jobs int
	Age  time.Duration
}

// DefaultWindow is the last 10 000 completions or the last 5 minutes.
var DefaultWindow = Window{Jobs: 10_000, Age: 5 * time.Minute}

// Queue is the state of one queue.
type Queue struct {
	Queue string `json:"queue"`
	// Runnable counts pending jobs whose run_at has passed; Scheduled, those
	// whose run_at is ahead (scheduled, or waiting out a retry backoff).
	Runnable  int64 `json:"runnable"`
	Scheduled int64 `json:"scheduled"`
	// OldestRunnableSeconds is how long the oldest runnable job has waited
	// since its run_at; 0 when none is runnable.
	OldestRunnableSeconds float64 `json:"oldest_runnable_seconds"`
	Running               int64   `json:"running"`
	// ExpiredLeases counts running jobs past their lease: their worker died
	// or stalled, and the next claim by any worker rescues them.
	ExpiredLeases int64 `json:"expired_leases"`
	// Paused is true while the queue is paused: its pending jobs wait, and
	// no worker claims them until it is resumed. A paused queue is listed
	// even without jobs.
	Paused bool `json:"paused"`
}

// Completed is the number of completed jobs the table holds (until
// retention deletes them).
type Completed struct {
	Jobs int64 `json:"jobs"`
	// Estimate is true when Jobs comes from table statistics rather than a
	// count: above CompletedExactUpTo rows, an exact count would read the
	// whole history.
	Estimate bool `json:"estimate"`
}

// KindDead counts the dead jobs of one kind. A dead job is never retried by
// itself.
type KindDead struct {
	Kind string `json:"kind"`
	Dead int64  `json:"dead"`
	// LastAt is when the most recent one died; nil if none has finished_at.
	LastAt *time.Time `json:"last_at"`
	// LastError is the most recent one's last_error, "" when it has none.
	LastError string `json:"last_error"`
}

// Recent is throughput and run time over the window of recent completions.
type Recent struct {
	// The window asked for.
	MaxJobs       int     `json:"max_jobs"`
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	// Jobs completed in the window; LimitedByJobs when that is MaxJobs, and
	// the window then spans back to the oldest of them rather than MaxAge.
	Jobs          int64   `json:"jobs"`
	LimitedByJobs bool    `json:"limited_by_jobs"`
	SpanSeconds   float64 `json:"span_seconds"`
	PerSecond     float64 `json:"per_second"`
	Kinds         []Kind  `json:"kinds"`
}

// Kind is one kind's share of the recent window.
type Kind struct {
	Kind      string  `json:"kind"`
	Jobs      int64   `json:"jobs"`
	PerSecond float64 `json:"per_second"`
	// Timed counts the jobs with a started_at; only they have a run time
	// (finished_at - started_at). P50Ms and P95Ms are nil when none has.
	Timed int64    `json:"timed"`
	P50Ms *float64 `json:"p50_ms"`
	P95Ms *float64 `json:"p95_ms"`
}

// Worker is one running worker process, as it last reported itself.
type Worker struct {
	ID     string   `json:"id"`
	Host   string   `json:"host"`
	PID    int      `json:"pid"`
	Queues []string `json:"queues"`
	Kinds  []string `json:"kinds"`
	// Mode is notify, wal or poll; WakeSource is up, down, or none (poll).
	Mode       string    `json:"mode"`
	WakeSource string    `json:"wake_source"`
	WakeError  string    `json:"wake_error"`
	StartedAt  time.Time `json:"started_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// LastSeenSeconds is how long ago LastSeenAt was, on the database clock.
	LastSeenSeconds float64 `json:"last_seen_seconds"`
}

// Snapshot is everything `fila stats` shows. Lists are never nil, so they
// encode as [] when empty.
type Snapshot struct {
	// At is the database's now() when the snapshot was read.
	At        time.Time  `json:"at"`
	Queues    []Queue    `json:"queues"`
	Completed Completed  `json:"completed"`
	Recent    Recent     `json:"recent"`
	Dead      []KindDead `json:"dead"`
	// Cancelled counts the cancelled jobs the table holds.
	Cancelled int64    `json:"cancelled"`
	Workers   []Worker `json:"workers"` // live ones
	// GoneWorkers counts worker rows not updated for WorkerGoneAfter: the
	// process died without a clean stop.
	GoneWorkers int `json:"gone_workers"`
	// NotifyTrigger is whether the insert trigger sends NOTIFY.
	NotifyTrigger bool `json:"notify_trigger"`
	// NotificationQueueUsage is pg_notification_queue_usage(), 0 to 1; when
	// it reaches 1, every notifying commit fails.
	NotificationQueueUsage float64 `json:"notification_queue_usage"`
	// Warnings are conditions that slow pickup without failing anything: a
	// worker whose wake source is down, notify-mode workers while the
	// trigger is off.
	Warnings []string `json:"warnings"`
}

// OldestRunnable returns the queue whose oldest runnable job has waited
// longest, and how long, in seconds; "" and 0 when nothing is runnable.
func (s *Snapshot) OldestRunnable() (queue string, seconds float64) {
	for _, q := range s.Queues {
		if q.Runnable > 0 && (queue == "" || q.OldestRunnableSeconds > seconds) {
			queue, seconds = q.Queue, q.OldestRunnableSeconds
		}
	}
	return queue, seconds
}

// DeadJobs returns the number of dead jobs of every kind.
func (s *Snapshot) DeadJobs() int64 {
	var n int64
	for _, d := range s.Dead {
		n += d.Dead
	}
	return n
}

// Collect reads a snapshot with DefaultWindow.
func Collect(ctx context.Context, db DB) (*Snapshot, error) {
	return CollectWindow(ctx, db, DefaultWindow)
}

// CollectWindow reads a snapshot whose recent completions are bounded by w.
// A database that lacks Fila's tables, or an older version of them, is an
// error that says to run `fila migrate`.
func CollectWindow(ctx context.Context, db DB, w Window) (*Snapshot, error) {
	if w.Jobs < 1 || w.Age <= 0 {
		return nil, fmt.Errorf("stats window of %d jobs and %s: both must be positive", w.Jobs, w.Age)
	}
	v, err := migrations.Version(ctx, db)
	if err != nil {
		return nil, err
	}
	switch {
	case v == 0:
		return nil, fmt.Errorf("%w: it has no Fila tables; run `fila migrate`", migrations.ErrNotMigrated)
	case v < migrations.Latest():
		return nil, migrations.Check(ctx, db)
	}
	s := &Snapshot{}
	err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return s.read(ctx, tx, w) })
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil, fmt.Errorf("%w: %s; run `fila migrate`", migrations.ErrNotMigrated, pgErr.Message)
	}
	if err != nil {
		return nil, fmt.Errorf("read queue statistics: %w", err)
	}
	return s, nil
}

// read queues every statement in one batch, so that the snapshot costs one
// round trip however many statements it has: on a busy machine each round
// trip waits for the server's process to be scheduled.
func (s *Snapshot) read(ctx context.Context, tx pgx.Tx, w Window) error {
	b := &pgx.Batch{}
	b.Queue(serialSQL)
	b.Queue(clockSQL).QueryRow(func(row pgx.Row) error {
		return row.Scan(&s.At, &s.NotificationQueueUsage)
	})
	queues := map[string]*Queue{}
	queue := func(name string) *Queue {
		q := queues[name]
		if q == nil {
			q = &Queue{Queue: name}
			queues[name] = q
		}
		return q
	}
	b.Queue(pendingSQL).Query(func(rows pgx.Rows) error {
		var (
			name                string
			runnable, scheduled int64
			oldest              *float64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &runnable, &scheduled, &oldest}, func() error {
			q := queue(name)
			q.Runnable, q.Scheduled = runnable, scheduled
			if oldest != nil {
				q.OldestRunnableSeconds = *oldest
			}
			return nil
		})
		return named("pending", err)
	})
	b.Queue(runningSQL).Query(func(rows pgx.Rows) error {
		var (
			name             string
			running, expired int64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &running, &expired}, func() error {
			q := queue(name)
			q.Running, q.ExpiredLeases = running, expired
			return nil
		})
		return named("running", err)
	})
	b.Queue(pausedSQL).Query(func(rows pgx.Rows) error {
		var name string
		_, err := pgx.ForEachRow(rows, []any{&name}, func() error {
			queue(name).Paused = true
			return nil
		})
		return named("paused", err)
	})
	var counted *int64 // nil when the estimate is far above CompletedExactUpTo
	var estimate float64
	b.Queue(completedSQL, CompletedExactUpTo+1, 4*CompletedExactUpTo).QueryRow(func(row pgx.Row) error {
		return named("completed", row.Scan(&counted, &estimate))
	})
	s.Recent = Recent{MaxJobs: w.Jobs, MaxAgeSeconds: w.Age.Seconds(), Kinds: []Kind{}}
	var span float64 // back to the oldest completion in the window, in seconds
	b.Queue(recentSQL, w.Jobs, w.Age.Seconds()).Query(func(rows pgx.Rows) error {
		var (
			k           Kind
			percentiles []*float64 // p50, p95; nil when no job of the kind is timed
			oldest      float64
		)
		_, err := pgx.ForEachRow(rows, []any{&k.Kind, &k.Jobs, &k.Timed, &percentiles, &oldest}, func() error {
			k.P50Ms, k.P95Ms = nil, nil
			if len(percentiles) == 2 {
				k.P50Ms, k.P95Ms = percentiles[0], percentiles[1]
			}
			s.Recent.Kinds = append(s.Recent.Kinds, k)
			s.Recent.Jobs += k.Jobs
			span = max(span, oldest)
			return nil
		})
		return named("recent", err)
	})
	s.Dead = []KindDead{}
	b.Queue(deadSQL).Query(func(rows pgx.Rows) error {
		var d KindDead
		_, err := pgx.ForEachRow(rows, []any{&d.Kind, &d.Dead, &d.LastAt, &d.LastError}, func() error {
			s.Dead = append(s.Dead, d)
			return nil
		})
		return named("dead", err)
	})
	b.Queue(cancelledSQL).QueryRow(func(row pgx.Row) error {
		return named("cancelled", row.Scan(&s.Cancelled))
	})
	b.Queue(triggerSQL).QueryRow(func(row pgx.Row) error {
		return named("trigger", row.Scan(&s.NotifyTrigger))
	})
	s.Workers = []Worker{}
	b.Queue(workersSQL, WorkerGoneAfter.Seconds()).Query(func(rows pgx.Rows) error {
		var (
			wk   Worker
			gone bool
		)
		_, err := pgx.ForEachRow(rows, []any{&wk.ID, &wk.Host, &wk.PID, &wk.Queues, &wk.Kinds, &wk.Mode, &wk.WakeSource,
			&wk.WakeError, &wk.StartedAt, &wk.LastSeenAt, &wk.LastSeenSeconds, &gone}, func() error {
			if gone {
				s.GoneWorkers++
			} else {
				s.Workers = append(s.Workers, wk)
			}
			return nil
		})
		return named("workers", err)
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}

	s.Queues = make([]Queue, 0, len(queues))
	for _, q := range queues {
		s.Queues = append(s.Queues, *q)
	}
	sort.Slice(s.Queues, func(i, j int) bool { return s.Queues[i].Queue < s.Queues[j].Queue })

	switch {
	case counted == nil:
		s.Completed = Completed{Jobs: int64(math.Round(estimate)), Estimate: true}
	case *counted > CompletedExactUpTo:
		// An index never measured, or measured when it was smaller than what
		// was just counted, still holds at least that many.
		s.Completed = Completed{Jobs: max(*counted, int64(math.Round(estimate))), Estimate: true}
	default:
		s.Completed = Completed{Jobs: *counted}
	}

	r := &s.Recent
	r.LimitedByJobs = r.Jobs >= int64(w.Jobs)
	r.SpanSeconds = w.Age.Seconds()
	if r.LimitedByJobs {
		r.SpanSeconds = span
	}
	if r.SpanSeconds > 0 {
		r.PerSecond = float64(r.Jobs) / r.SpanSeconds
		for i := range r.Kinds {
			r.Kinds[i].PerSecond = float64(r.Kinds[i].Jobs) / r.SpanSeconds
		}
	}
	s.warn()
	return nil
}

// named says which statement an error came from.
func named(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// warn lists what slows pickup without failing anything.
func (s *Snapshot) warn() {
	s.Warnings = []string{}
	var notify []string
	for _, w := range s.Workers {
		if w.WakeSource == "down" {
			why := w.WakeError
			if why == "" {
				why = "no error recorded"
			}
			s.Warnings = append(s.Warnings, fmt.Sprintf(
				"worker %s (%s, pid %d): its %s wake source is down (%s); it finds new jobs only by polling",
				w.ID, w.Host, w.PID, w.Mode, why))
		}
		if w.Mode == "notify" {
			notify = append(notify, w.ID)
		}
	}
	if !s.NotifyTrigger && len(notify) > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf(
			"the notify trigger is off while %d live worker(s) run in notify mode (%s): they find new jobs only by their safety poll; run `fila trigger on`, or restart them with --mode wal",
			len(notify), strings.Join(notify, ", ")))
	}
}
