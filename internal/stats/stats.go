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
	"slices"
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

// LivenessMissed is how many refreshes of its row a worker may miss
// before it counts as gone: each worker refreshes it every liveness
// interval of its own (runtime.Config.LivenessInterval, 5 s by default),
// so a worker killed without a clean stop drops out of every view two to
// three intervals after it died. The schema's fila_worker_live decides.
const LivenessMissed = 3

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
	// even without jobs, and its wait is not the oldest runnable job's
	// (see OldestRunnable).
	Paused bool `json:"paused"`
	// PausedSeconds is how long ago it was paused; 0 unless Paused.
	PausedSeconds float64 `json:"paused_seconds"`
	// Waiting counts jobs waiting for their dependencies or for the job
	// before them in their sequence; Blocked, those of them whose sequence
	// is blocked by a dead job (see Snapshot.Blocked).
	Waiting int64 `json:"waiting"`
	Blocked int64 `json:"blocked"`
	// Held counts jobs inserted held, which run only once released.
	Held int64 `json:"held"`
}

// BlockedSequence is a sequence whose next job waits behind a dead one:
// it goes on once the dead job is retried (and completes) or deleted.
type BlockedSequence struct {
	Sequence string `json:"sequence"`
	DeadJob  int64  `json:"dead_job"`
	NextJob  int64  `json:"next_job"`
	Queue    string `json:"queue"`
}

// Unhandled is the pending jobs of one kind on one queue that no live
// worker of the queue handles: a kind misspelt, its worker not deployed
// yet or stopped, or the kind retired. They wait for ever, silently,
// unless someone starts a worker for them (or deletes them).
type Unhandled struct {
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	// Pending counts them all; Runnable those already due.
	Pending  int64 `json:"pending"`
	Runnable int64 `json:"runnable"`
	// HandledOn lists the other queues whose live workers handle the kind:
	// a queue misspelt, or a worker started on the wrong one.
	HandledOn []string `json:"handled_on"`
}

// OrphanedTask is a recurring task that no live worker schedules: every
// worker that declared it is gone, or it was removed from their
// configuration. No job is enqueued for it until one does again.
type OrphanedTask struct {
	Task  string `json:"task"`
	Kind  string `json:"kind"`
	Queue string `json:"queue"`
	// LastSlot is the last slot a job was enqueued for, NextSlot the one
	// its last scheduler expected next (past, once it is due); nil when
	// unknown.
	LastSlot *time.Time `json:"last_slot"`
	NextSlot *time.Time `json:"next_slot"`
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

// QueueDead counts the dead jobs of one queue.
type QueueDead struct {
	Queue string `json:"queue"`
	Dead  int64  `json:"dead"`
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
	// Kinds are the kinds it handles, on every one of its Queues.
	Kinds []string `json:"kinds"`
	// Recurring names the recurring tasks it schedules.
	Recurring []string `json:"recurring"`
	// Mode is notify, wal or poll; WakeSource is up, down, or none (poll).
	Mode       string `json:"mode"`
	WakeSource string `json:"wake_source"`
	WakeError  string `json:"wake_error"`
	// Degraded says what the worker does less of than configured, and why
	// (claims cut by timeouts); "" when nothing.
	Degraded   string    `json:"degraded"`
	StartedAt  time.Time `json:"started_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// LastSeenSeconds is how long ago LastSeenAt was, on the database clock.
	LastSeenSeconds float64 `json:"last_seen_seconds"`
	// LivenessIntervalSeconds is how often it refreshes its row: it counts
	// as gone once LastSeenSeconds passes LivenessMissed of them.
	LivenessIntervalSeconds float64 `json:"liveness_interval_seconds"`
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
	// DeadByQueue counts the dead jobs per queue, for the queues that have
	// any.
	DeadByQueue []QueueDead `json:"dead_by_queue"`
	// Cancelled counts the cancelled jobs the table holds.
	Cancelled int64 `json:"cancelled"`
	// Blocked lists sequences blocked by a dead job, at most 20.
	Blocked []BlockedSequence `json:"blocked_sequences"`
	Workers []Worker          `json:"workers"` // live ones
	// GoneWorkers counts worker rows that missed LivenessMissed refreshes:
	// the process died without a clean stop, is frozen, or cannot reach
	// the database. Any worker deletes such rows an hour after their last
	// refresh.
	GoneWorkers int `json:"gone_workers"`
	// Unhandled lists the pending jobs no live worker of their queue
	// handles, per queue and kind, the most first.
	Unhandled []Unhandled `json:"unhandled"`
	// OrphanedTasks lists the recurring tasks no live worker schedules.
	OrphanedTasks []OrphanedTask `json:"orphaned_tasks"`
	// NotifyTrigger is whether the insert trigger sends NOTIFY.
	NotifyTrigger bool `json:"notify_trigger"`
	// NotificationQueueUsage is pg_notification_queue_usage(), 0 to 1; when
	// it reaches 1, every notifying commit fails.
	NotificationQueueUsage float64 `json:"notification_queue_usage"`
	// Warnings are conditions that slow or stop work without failing
	// anything: pending jobs no live worker handles, recurring tasks no
	// live worker schedules, a worker whose wake source is down or whose
	// claims timeouts cut, notify-mode workers while the trigger is off.
	Warnings []string `json:"warnings"`
}

// OldestRunnable returns the queue whose oldest runnable job has waited
// longest, and how long, in seconds; "" and 0 when nothing is runnable.
// Paused queues are left out: their jobs wait on purpose.
func (s *Snapshot) OldestRunnable() (queue string, seconds float64) {
	for _, q := range s.Queues {
		if q.Runnable > 0 && !q.Paused && (queue == "" || q.OldestRunnableSeconds > seconds) {
			queue, seconds = q.Queue, q.OldestRunnableSeconds
		}
	}
	return queue, seconds
}

// Paused returns the paused queues, in name order.
func (s *Snapshot) Paused() []Queue {
	var out []Queue
	for _, q := range s.Queues {
		if q.Paused {
			out = append(out, q)
		}
	}
	return out
}

// UnhandledJobs returns the number of pending jobs no live worker handles.
func (s *Snapshot) UnhandledJobs() int64 {
	var n int64
	for _, u := range s.Unhandled {
		n += u.Pending
	}
	return n
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
	var pending []Unhandled // per queue and kind, until the workers are known
	b.Queue(pendingSQL).Query(func(rows pgx.Rows) error {
		var (
			name, kind          string
			runnable, scheduled int64
			oldest              *float64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &kind, &runnable, &scheduled, &oldest}, func() error {
			q := queue(name)
			q.Runnable += runnable
			q.Scheduled += scheduled
			if oldest != nil {
				q.OldestRunnableSeconds = max(q.OldestRunnableSeconds, *oldest)
			}
			pending = append(pending, Unhandled{Queue: name, Kind: kind, Pending: runnable + scheduled, Runnable: runnable})
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
	b.Queue(waitingSQL).Query(func(rows pgx.Rows) error {
		var (
			name             string
			waiting, blocked int64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &waiting, &blocked}, func() error {
			q := queue(name)
			q.Waiting, q.Blocked = waiting, blocked
			return nil
		})
		return named("waiting", err)
	})
	b.Queue(heldSQL).Query(func(rows pgx.Rows) error {
		var (
			name string
			held int64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &held}, func() error {
			queue(name).Held = held
			return nil
		})
		return named("held", err)
	})
	s.Blocked = []BlockedSequence{}
	b.Queue(blockedSQL).Query(func(rows pgx.Rows) error {
		var bs BlockedSequence
		_, err := pgx.ForEachRow(rows, []any{&bs.Sequence, &bs.DeadJob, &bs.NextJob, &bs.Queue}, func() error {
			s.Blocked = append(s.Blocked, bs)
			return nil
		})
		return named("blocked sequences", err)
	})
	b.Queue(pausedSQL).Query(func(rows pgx.Rows) error {
		var (
			name string
			secs float64
		)
		_, err := pgx.ForEachRow(rows, []any{&name, &secs}, func() error {
			q := queue(name)
			q.Paused, q.PausedSeconds = true, secs
			return nil
		})
		return named("paused", err)
	})
	var tasks []OrphanedTask // every task, until the workers are known
	b.Queue(recurringSQL).Query(func(rows pgx.Rows) error {
		var t OrphanedTask
		_, err := pgx.ForEachRow(rows, []any{&t.Task, &t.Kind, &t.Queue, &t.LastSlot, &t.NextSlot}, func() error {
			tasks = append(tasks, t)
			return nil
		})
		return named("recurring", err)
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
	s.DeadByQueue = []QueueDead{}
	b.Queue(deadQueuesSQL).Query(func(rows pgx.Rows) error {
		var d QueueDead
		_, err := pgx.ForEachRow(rows, []any{&d.Queue, &d.Dead}, func() error {
			s.DeadByQueue = append(s.DeadByQueue, d)
			return nil
		})
		return named("dead per queue", err)
	})
	b.Queue(cancelledSQL).QueryRow(func(row pgx.Row) error {
		return named("cancelled", row.Scan(&s.Cancelled))
	})
	b.Queue(triggerSQL).QueryRow(func(row pgx.Row) error {
		return named("trigger", row.Scan(&s.NotifyTrigger))
	})
	s.Workers = []Worker{}
	b.Queue(workersSQL).Query(func(rows pgx.Rows) error {
		var (
			wk   Worker
			live bool
		)
		_, err := pgx.ForEachRow(rows, []any{&wk.ID, &wk.Host, &wk.PID, &wk.Queues, &wk.Kinds, &wk.Recurring, &wk.Mode, &wk.WakeSource,
			&wk.WakeError, &wk.Degraded, &wk.StartedAt, &wk.LastSeenAt, &wk.LastSeenSeconds, &wk.LivenessIntervalSeconds, &live}, func() error {
			if live {
				s.Workers = append(s.Workers, wk)
			} else {
				s.GoneWorkers++
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
	s.unserved(pending, tasks)

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

// unserved keeps, of the pending jobs per queue and kind and of the
// recurring tasks, those no live worker serves.
func (s *Snapshot) unserved(pending []Unhandled, tasks []OrphanedTask) {
	handles := map[[2]string]bool{} // (queue, kind) some live worker handles
	kindQueues := map[string][]string{}
	schedules := map[string]bool{}
	for _, w := range s.Workers {
		for _, q := range w.Queues {
			for _, k := range w.Kinds {
				if !handles[[2]string{q, k}] {
					handles[[2]string{q, k}] = true
					kindQueues[k] = append(kindQueues[k], q)
				}
			}
		}
		for _, t := range w.Recurring {
			schedules[t] = true
		}
	}
	s.Unhandled = []Unhandled{}
	for _, u := range pending {
		if handles[[2]string{u.Queue, u.Kind}] {
			continue
		}
		u.HandledOn = slices.Clone(kindQueues[u.Kind])
		if u.HandledOn == nil {
			u.HandledOn = []string{}
		}
		slices.Sort(u.HandledOn)
		s.Unhandled = append(s.Unhandled, u)
	}
	sort.SliceStable(s.Unhandled, func(i, j int) bool {
		a, b := s.Unhandled[i], s.Unhandled[j]
		if a.Pending != b.Pending {
			return a.Pending > b.Pending
		}
		if a.Queue != b.Queue {
			return a.Queue < b.Queue
		}
		return a.Kind < b.Kind
	})
	s.OrphanedTasks = []OrphanedTask{}
	for _, t := range tasks {
		if !schedules[t.Task] {
			s.OrphanedTasks = append(s.OrphanedTasks, t)
		}
	}
}

// named says which statement an error came from.
func named(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// warn lists what slows or stops work without failing anything.
func (s *Snapshot) warn() {
	s.Warnings = []string{}
	for _, u := range s.Unhandled {
		jobs := "jobs"
		if u.Pending == 1 {
			jobs = "job"
		}
		m := fmt.Sprintf("%d pending %s of kind %q on queue %s: no live worker handles it", u.Pending, jobs, u.Kind, u.Queue)
		if u.Runnable != u.Pending {
			m += fmt.Sprintf(" (%d due now)", u.Runnable)
		}
		if len(u.HandledOn) > 0 {
			m += fmt.Sprintf("; live workers handle it on queue %s", strings.Join(u.HandledOn, ", "))
		}
		s.Warnings = append(s.Warnings, m)
	}
	for _, t := range s.OrphanedTasks {
		m := fmt.Sprintf("recurring task %q (kind %q on queue %s) is orphaned: no live worker schedules it", t.Task, t.Kind, t.Queue)
		if t.NextSlot != nil && t.NextSlot.Before(s.At) {
			m += fmt.Sprintf(", and its slot of %s passed %s ago without a job", t.NextSlot.UTC().Format(time.RFC3339),
				s.At.Sub(*t.NextSlot).Round(time.Second))
		}
		m += "; start a worker that declares it, or delete it (fila recurring delete)"
		s.Warnings = append(s.Warnings, m)
	}
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
		if w.Degraded != "" {
			s.Warnings = append(s.Warnings, fmt.Sprintf("worker %s (%s, pid %d): %s", w.ID, w.Host, w.PID, w.Degraded))
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
