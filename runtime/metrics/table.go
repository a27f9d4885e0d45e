package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/runtime"
)

var (
	jobsDesc = prometheus.NewDesc("fila_jobs",
		"Jobs in the table per queue and state: pending (runnable or scheduled), running, waiting (for dependencies or a sequence) and held (until released). Dead jobs are fila_queue_dead_jobs per queue and fila_dead_jobs per kind; cancelled and completed ones are counted table-wide: fila_cancelled_jobs, fila_completed_jobs.",
		[]string{"queue", "state"}, nil)
	runnableDesc = prometheus.NewDesc("fila_runnable_jobs",
		"Pending jobs whose run_at has passed: the backlog, without jobs scheduled for later or waiting out a retry backoff.",
		[]string{"queue"}, nil)
	oldestDesc = prometheus.NewDesc("fila_oldest_runnable_job_age_seconds",
		"How long the oldest runnable job of the queue has waited since its run_at, on the database clock; 0 when none is runnable.",
		[]string{"queue"}, nil)
	expiredDesc = prometheus.NewDesc("fila_expired_leases",
		"Running jobs past their lease: their worker died or stalled, and the next claim by any worker rescues them.",
		[]string{"queue"}, nil)
	pausedDesc = prometheus.NewDesc("fila_queue_paused",
		"1 while the queue is paused (its pending jobs wait, no worker claims them), else 0.",
		[]string{"queue"}, nil)
	deadDesc = prometheus.NewDesc("fila_dead_jobs",
		"Dead jobs in the table per kind: failed for good, never retried by themselves.",
		[]string{"kind"}, nil)
	queueDeadDesc = prometheus.NewDesc("fila_queue_dead_jobs",
		"Dead jobs in the table per queue: failed for good, never retried by themselves.",
		[]string{"queue"}, nil)
	cancelledDesc = prometheus.NewDesc("fila_cancelled_jobs",
		"Cancelled jobs in the table.", nil, nil)
	completedDesc = prometheus.NewDesc("fila_completed_jobs",
		"Completed jobs in the table, until retention deletes them: exact up to 10 000, then an estimate from the table's statistics.",
		nil, nil)
	notifyUsageDesc = prometheus.NewDesc("fila_notification_queue_usage_ratio",
		"pg_notification_queue_usage(): the share of PostgreSQL's notification queue in use, 0 to 1. At 1 every notifying commit fails.",
		nil, nil)
	liveWorkersDesc = prometheus.NewDesc("fila_live_workers",
		"Live workers serving the queue, by the state of their wake source (up, down, or none in poll mode), from the workers table: a worker that missed three refreshes of its row (5 s apart by default) is not counted.",
		[]string{"queue", "wake_source"}, nil)
	unhandledDesc = prometheus.NewDesc("fila_unhandled_jobs",
		"Pending jobs of the kind on the queue that no live worker of the queue handles: a kind misspelt, its worker not deployed or stopped, or the kind retired. They wait until one does. Present only while there are some.",
		[]string{"queue", "kind"}, nil)
	orphanedDesc = prometheus.NewDesc("fila_orphaned_recurring_tasks",
		"Recurring tasks no live worker schedules: no job is enqueued for them until one that declares them runs again.",
		nil, nil)
	statsUpDesc = prometheus.NewDesc("fila_stats_up",
		"1 when the last read of the jobs table's statistics succeeded, else 0 (and the table's gauges are absent).",
		nil, nil)
)

// tableStats serves the jobs table's gauges from a snapshot that one
// scrape reads and the scrapes after it reuse until it is maxAge old.
type tableStats struct {
	db      *pgxpool.Pool
	maxAge  time.Duration
	timeout time.Duration
	log     *zap.Logger

	mu     sync.Mutex // held during a read: concurrent scrapes wait for it and share its result
	queues []string   // exported even while the table has no job of theirs
	kinds  []string   // exported in fila_dead_jobs even while none is dead
	snap   *stats.Snapshot
	err    error
	readAt time.Time
}

func newTableStats(opts Options, log *zap.Logger) *tableStats {
	t := &tableStats{db: opts.DB, maxAge: opts.StatsMaxAge, timeout: opts.StatsTimeout, log: log}
	t.expectQueues(opts.Queues)
	t.kinds = slices.Clone(opts.Kinds)
	return t
}

func (t *tableStats) expectQueues(queues []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range queues {
		if !slices.Contains(t.queues, q) {
			t.queues = append(t.queues, q)
		}
	}
}

func (t *tableStats) describe(ch chan<- *prometheus.Desc) {
	if t.db == nil {
		return
	}
	for _, d := range []*prometheus.Desc{jobsDesc, runnableDesc, oldestDesc, expiredDesc, pausedDesc, deadDesc,
		queueDeadDesc, cancelledDesc, completedDesc, notifyUsageDesc, liveWorkersDesc, unhandledDesc, orphanedDesc, statsUpDesc} {
		ch <- d
	}
}

// snapshot returns the cached snapshot, or reads a new one once the cached
// one, or the cached failure, is maxAge old.
func (t *tableStats) snapshot() (*stats.Snapshot, []string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.readAt.IsZero() || time.Since(t.readAt) >= t.maxAge {
		ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
		s, err := stats.Collect(ctx, t.db)
		cancel()
		if err != nil {
			t.log.Warn("cannot read the jobs table's statistics; fila_stats_up is 0", zap.Error(err))
			s = nil
		}
		t.snap, t.err, t.readAt = s, err, time.Now()
	}
	return t.snap, slices.Clone(t.queues), t.err
}

func (t *tableStats) collect(ch chan<- prometheus.Metric) {
	if t.db == nil {
		return
	}
	s, queues, err := t.snapshot()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 1)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	byName := map[string]stats.Queue{}
	for _, q := range s.Queues {
		byName[q.Queue] = q
		if !slices.Contains(queues, q.Queue) {
			queues = append(queues, q.Queue)
		}
	}
	// Every queue of the table's gauges, and every queue with dead jobs,
	// has a dead count: 0 for a known queue without any, so the first dead
	// job is an increase a rate or an alert sees.
	dead := map[string]int64{}
	deadQueues := slices.Clone(queues)
	for _, d := range s.DeadByQueue {
		dead[d.Queue] = d.Dead
		if !slices.Contains(deadQueues, d.Queue) {
			deadQueues = append(deadQueues, d.Queue)
		}
	}
	slices.Sort(deadQueues)
	for _, name := range deadQueues {
		gauge(queueDeadDesc, float64(dead[name]), name)
	}
	workers := map[string]map[string]int{} // queue → wake source → live workers
	for _, w := range s.Workers {
		for _, q := range w.Queues {
			if workers[q] == nil {
				workers[q] = map[string]int{}
				if !slices.Contains(queues, q) {
					queues = append(queues, q)
				}
			}
			workers[q][w.WakeSource]++
		}
	}
	slices.Sort(queues)
	for _, name := range queues {
		q := byName[name] // zero for a known queue without jobs
		gauge(jobsDesc, float64(q.Runnable+q.Scheduled), name, runtime.StatePending)
		gauge(jobsDesc, float64(q.Running), name, runtime.StateRunning)
		gauge(jobsDesc, float64(q.Waiting), name, runtime.StateWaiting)
		gauge(jobsDesc, float64(q.Held), name, runtime.StateHeld)
		gauge(runnableDesc, float64(q.Runnable), name)
		gauge(oldestDesc, q.OldestRunnableSeconds, name)
		gauge(expiredDesc, float64(q.ExpiredLeases), name)
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		gauge(pausedDesc, paused, name)
		for _, src := range []string{"up", "down", "none"} {
			gauge(liveWorkersDesc, float64(workers[name][src]), name, src)
		}
	}
	for _, d := range s.Dead {
		gauge(deadDesc, float64(d.Dead), d.Kind)
	}
	for _, k := range t.kinds {
		if !slices.ContainsFunc(s.Dead, func(d stats.KindDead) bool { return d.Kind == k }) {
			gauge(deadDesc, 0, k)
		}
	}
	for _, u := range s.Unhandled {
		gauge(unhandledDesc, float64(u.Pending), u.Queue, u.Kind)
	}
	gauge(orphanedDesc, float64(len(s.OrphanedTasks)))
	gauge(cancelledDesc, float64(s.Cancelled))
	gauge(completedDesc, float64(s.Completed.Jobs))
	gauge(notifyUsageDesc, s.NotificationQueueUsage)
}
