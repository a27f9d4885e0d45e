package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

// serve registers m on a registry of its own and serves it over HTTP until
// the test ends; it returns the /metrics URL.
func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(m))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// TestScrapeOfARealWorker runs jobs that complete, retry and die on a real
// runtime, scrapes its metrics over HTTP and checks each against what
// happened and what the table holds.
func TestScrapeOfARealWorker(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	kinds := []string{"ok", "fails", "perm"}
	m := metrics.New(metrics.Options{DB: db.Pool, StatsMaxAge: 50 * time.Millisecond, Kinds: kinds,
		Logger: zaptest.NewLogger(t)})
	rt := start(t, runtime.Config{
		DSN: db.DSN, ListenDSN: db.DirectDSN, Observer: m, Logger: zaptest.NewLogger(t),
		// The failed attempt's UPDATE notifies at once; a retry due 200–400 ms
		// later is still in the future when that wake-up claims, so only the
		// timer can start it.
		RetryBase: 400 * time.Millisecond, RetryMax: 400 * time.Millisecond, SafetyPoll: 10 * time.Minute,
		Kinds: []runtime.Kind{
			{Name: "ok", Handler: func(context.Context, *runtime.Job) error { time.Sleep(20 * time.Millisecond); return nil }},
			{Name: "fails", Handler: func(context.Context, *runtime.Job) error { return errors.New("no") }},
			{Name: "perm", Handler: func(context.Context, *runtime.Job) error { return runtime.Permanent(errors.New("never")) }},
		},
	})
	m.Attach(rt)
	url := serve(t, m)

	// Before any job: the first claim found nothing, and every series of the
	// runtime's queue and of the expected kinds exists at zero.
	f := scrape(t, url)
	require.GreaterOrEqual(t, f.value(t, "fila_claims_empty_total", "queue", "default"), 1.0)
	require.GreaterOrEqual(t, f.value(t, "fila_wakeups_total", "queue", "default", "reason", "poll"), 1.0)
	for _, k := range kinds {
		for _, o := range []string{"completed", "retried", "dead", "cancelled", "lease_lost", "released", "fenced", "snoozed"} {
			require.Zero(t, f.value(t, "fila_job_outcomes_total", "kind", k, "outcome", o), "%s %s", k, o)
		}
		require.Zero(t, f.histogram(t, "fila_job_run_duration_seconds", "kind", k).GetSampleCount())
	}
	require.Zero(t, f.histogram(t, "fila_pickup_latency_seconds", "queue", "default").GetSampleCount())

	// Rows of a queue no runtime works here, written as another process
	// would have left them: one runnable for 10 s, one scheduled, one
	// running, and one running past its lease, which the runtime's next
	// claim rescues (a claim rescues expired leases of every queue).
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind, state, run_at, created_at, started_at, attempts, lease_until) VALUES
		('other', 'elsewhere', 'pending', now() - interval '10 seconds', now() - interval '10 seconds', NULL, 0, NULL),
		('other', 'elsewhere', 'pending', now() + interval '1 hour', now(), NULL, 0, NULL),
		('other', 'elsewhere', 'running', now() - interval '1 minute', now() - interval '1 minute', now(), 1, now() + interval '1 hour'),
		('other', 'elsewhere', 'running', now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 minute', 1, now() - interval '1 second')`)
	require.NoError(t, err)
	for range 3 {
		_, err := runtime.Insert(ctx, db.Pool, "ok", nil, nil)
		require.NoError(t, err)
	}
	_, err = runtime.Insert(ctx, db.Pool, "fails", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	_, err = runtime.Insert(ctx, db.Pool, "perm", nil, nil)
	require.NoError(t, err)

	waitFor(t, 20*time.Second, "every outcome observed and the table read after them", func() bool {
		f = scrape(t, url)
		return f.value(t, "fila_job_outcomes_total", "kind", "fails", "outcome", "dead") == 1 &&
			f.value(t, "fila_job_outcomes_total", "kind", "ok", "outcome", "completed") == 3 &&
			f.value(t, "fila_job_outcomes_total", "kind", "perm", "outcome", "dead") == 1 &&
			f.value(t, "fila_dead_jobs", "kind", "fails") == 1 &&
			f.value(t, "fila_completed_jobs") == 3 &&
			// An attempt's run time is recorded apart from its outcome: on a
			// loaded machine a scrape came between the two.
			f.histogram(t, "fila_job_run_duration_seconds", "kind", "fails").GetSampleCount() == 2 &&
			f.histogram(t, "fila_job_run_duration_seconds", "kind", "ok").GetSampleCount() == 3 &&
			f.histogram(t, "fila_job_run_duration_seconds", "kind", "perm").GetSampleCount() == 1
	})

	// Six attempts ran: three ok, fails twice, perm once.
	require.EqualValues(t, 6, f.histogram(t, "fila_pickup_latency_seconds", "queue", "default").GetSampleCount())
	require.Equal(t, 6.0, f.value(t, "fila_claimed_jobs_total", "queue", "default"))
	okRun := f.histogram(t, "fila_job_run_duration_seconds", "kind", "ok")
	require.EqualValues(t, 3, okRun.GetSampleCount())
	require.GreaterOrEqual(t, okRun.GetSampleSum(), 3*0.020, "each ok handler slept 20 ms")
	require.EqualValues(t, 2, f.histogram(t, "fila_job_run_duration_seconds", "kind", "fails").GetSampleCount())
	require.EqualValues(t, 1, f.histogram(t, "fila_job_run_duration_seconds", "kind", "perm").GetSampleCount())

	outcomes := map[[2]string]float64{
		{"ok", "completed"}: 3, {"fails", "retried"}: 1, {"fails", "dead"}: 1, {"perm", "dead"}: 1,
	}
	for _, k := range kinds {
		for _, o := range []string{"completed", "retried", "dead", "cancelled", "lease_lost", "released", "fenced", "snoozed"} {
			require.Equal(t, outcomes[[2]string{k, o}], f.value(t, "fila_job_outcomes_total", "kind", k, "outcome", o), "%s %s", k, o)
		}
	}

	claims := f.value(t, "fila_claims_total", "queue", "default")
	empty := f.value(t, "fila_claims_empty_total", "queue", "default")
	require.GreaterOrEqual(t, empty, 1.0)
	require.Greater(t, claims, empty, "some claims took jobs")
	require.LessOrEqual(t, claims-empty, 6.0, "at most one claim per job")
	require.Equal(t, 1.0, f.value(t, "fila_leases_rescued_total", "queue", "default"))
	require.GreaterOrEqual(t, f.value(t, "fila_wakeups_total", "queue", "default", "reason", "notify"), 1.0, "inserts notified")
	require.GreaterOrEqual(t, f.value(t, "fila_wakeups_total", "queue", "default", "reason", "timer"), 1.0, "the retry came due on the timer")
	require.Zero(t, f.value(t, "fila_wakeups_total", "queue", "default", "reason", "wal"))
	var wakeups float64
	for _, s := range f["fila_wakeups_total"].GetMetric() {
		wakeups += s.GetCounter().GetValue()
	}
	// Each claim has one reason, counted just before it: a scrape may fall
	// between the two.
	require.True(t, wakeups == claims || wakeups == claims+1, "wakeups %v, claims %v", wakeups, claims)

	require.Equal(t, 1.0, f.value(t, "fila_wake_source_up", "mode", "notify"))
	require.Zero(t, f.value(t, "fila_wake_source_reconnects_total", "mode", "notify"))
	require.Zero(t, f.value(t, "fila_handlers_running"))

	// The table's gauges, against the rows. A queue paused now shows at
	// the next read of the table (StatsMaxAge is 50 ms).
	require.NoError(t, runtime.PauseQueue(ctx, db.Pool, "other"))
	waitFor(t, 10*time.Second, "the paused queue in a scrape", func() bool {
		f = scrape(t, url)
		return f.value(t, "fila_queue_paused", "queue", "other") == 1
	})
	require.Zero(t, f.value(t, "fila_queue_paused", "queue", "default"))
	for queue, want := range map[string]map[string]float64{
		"default": {"pending": 0, "running": 0},
		"other":   {"pending": 3, "running": 1},
	} {
		for state, n := range want {
			require.Equal(t, n, f.value(t, "fila_jobs", "queue", queue, "state", state), "%s %s", queue, state)
		}
	}
	require.Equal(t, 2.0, f.value(t, "fila_runnable_jobs", "queue", "other"), "the job run 10 s ago and the rescued one")
	require.Zero(t, f.value(t, "fila_runnable_jobs", "queue", "default"))
	require.InDelta(t, 10, f.value(t, "fila_oldest_runnable_job_age_seconds", "queue", "other"), 8)
	require.Zero(t, f.value(t, "fila_oldest_runnable_job_age_seconds", "queue", "default"))
	require.Equal(t, 1.0, f.value(t, "fila_dead_jobs", "kind", "fails"))
	require.Equal(t, 1.0, f.value(t, "fila_dead_jobs", "kind", "perm"))
	require.Zero(t, f.value(t, "fila_dead_jobs", "kind", "ok"), "an expected kind without dead jobs")
	require.Equal(t, 2.0, f.value(t, "fila_queue_dead_jobs", "queue", "default"), "fails and perm died on the default queue")
	require.Zero(t, f.value(t, "fila_queue_dead_jobs", "queue", "other"), "a known queue without dead jobs")
	require.Equal(t, 3.0, f.value(t, "fila_completed_jobs"))
	require.Zero(t, f.value(t, "fila_cancelled_jobs"))
	require.Zero(t, f.value(t, "fila_expired_leases", "queue", "other"), "rescued")
	usage := f.value(t, "fila_notification_queue_usage_ratio")
	require.True(t, usage >= 0 && usage <= 1, "usage %v", usage)
	require.Equal(t, 1.0, f.value(t, "fila_stats_up"))

	for name, fam := range f {
		require.True(t, strings.HasPrefix(name, "fila_"), name)
		require.NotEmpty(t, fam.GetHelp(), name)
		if fam.GetType() == dto.MetricType_COUNTER {
			require.True(t, strings.HasSuffix(name, "_total"), name)
		}
	}
}

// TestTableStatsAreCached: scrapes within StatsMaxAge reuse one read of the
// table; a later scrape reads it again.
func TestTableStatsAreCached(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const maxAge = 2 * time.Second
	url := serve(t, metrics.New(metrics.Options{DB: db.Pool, StatsMaxAge: maxAge, Queues: []string{"q"}}))
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind, state, started_at, attempts, lease_until, finished_at) VALUES
		('r', 'k', 'running', now() - interval '1 minute', 1, now() - interval '1 second', NULL),
		('r', 'k', 'cancelled', now() - interval '1 minute', 1, NULL, now())`)
	require.NoError(t, err)
	read := time.Now()
	f := scrape(t, url)
	require.Zero(t, f.value(t, "fila_jobs", "queue", "q", "state", "pending"), "a known queue is exported before it has jobs")
	require.Equal(t, 1.0, f.value(t, "fila_jobs", "queue", "r", "state", "running"))
	require.Equal(t, 1.0, f.value(t, "fila_expired_leases", "queue", "r"), "a lease nobody rescued")
	require.Zero(t, f.value(t, "fila_expired_leases", "queue", "q"))
	require.Equal(t, 1.0, f.value(t, "fila_cancelled_jobs"))
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "q"})
	require.NoError(t, err)
	f = scrape(t, url)
	if time.Since(read) < maxAge {
		require.Zero(t, f.value(t, "fila_jobs", "queue", "q", "state", "pending"), "served from the first read")
	}
	waitFor(t, 10*time.Second, "the table read again after StatsMaxAge", func() bool {
		return scrape(t, url).value(t, "fila_jobs", "queue", "q", "state", "pending") == 1
	})
}

// TestUnservedWorkFromTheTable: live workers per queue and wake source,
// pending jobs no live worker handles and recurring tasks none schedules
// come from the table; a worker that missed three refreshes counts for
// nothing, and the series of this process's queues stay, at zero.
func TestUnservedWorkFromTheTable(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	url := serve(t, metrics.New(metrics.Options{DB: db.Pool, StatsMaxAge: time.Millisecond, Queues: []string{"mail"}}))
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, last_seen_at, recurring) VALUES
		('h/1/a', 'h', 1, '{mail,reports}', '{send,report}', 'notify', 'up', interval '5 seconds', now(), '{nightly}'),
		('h/2/b', 'h', 2, '{mail}', '{send}', 'wal', 'down', interval '5 seconds', now(), '{}'),
		('h/3/c', 'h', 3, '{mail}', '{sms}', 'notify', 'up', interval '5 seconds', now() - interval '16 seconds', '{weekly}');
		INSERT INTO fila_jobs (queue, kind) VALUES ('mail', 'send'), ('mail', 'sms'), ('mail', 'sned'), ('mail', 'sned');
		INSERT INTO fila_recurring (task, schedule, kind) VALUES ('nightly', '0 2 * * *', 'report'), ('weekly', '0 3 * * 1', 'report')`)
	require.NoError(t, err)
	f := scrape(t, url)
	for q, want := range map[string][3]float64{"mail": {1, 1, 0}, "reports": {1, 0, 0}} {
		for i, src := range []string{"up", "down", "none"} {
			require.Equal(t, want[i], f.value(t, "fila_live_workers", "queue", q, "wake_source", src), "%s %s", q, src)
		}
	}
	require.Equal(t, 2.0, f.value(t, "fila_unhandled_jobs", "queue", "mail", "kind", "sned"))
	require.Equal(t, 1.0, f.value(t, "fila_unhandled_jobs", "queue", "mail", "kind", "sms"), "its only worker is gone")
	require.Nil(t, f.metric("fila_unhandled_jobs", "kind", "send"), "handled")
	require.Equal(t, 1.0, f.value(t, "fila_orphaned_recurring_tasks"))

	// Every worker gone.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_workers SET last_seen_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the table read again", func() bool {
		f = scrape(t, url)
		return f.value(t, "fila_orphaned_recurring_tasks") == 2
	})
	for _, src := range []string{"up", "down", "none"} {
		require.Zero(t, f.value(t, "fila_live_workers", "queue", "mail", "wake_source", src), src)
	}
	require.Nil(t, f.metric("fila_live_workers", "queue", "reports"), "a queue of no job, no live worker and not this process's")
	require.Equal(t, 1.0, f.value(t, "fila_unhandled_jobs", "queue", "mail", "kind", "send"))
}

// TestUnreadableTableLeavesTheRestServed: when the table cannot be read,
// fila_stats_up says so and the process's own metrics are still served.
func TestUnreadableTableLeavesTheRestServed(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m := metrics.New(metrics.Options{DB: pool, Queues: []string{"q"}, Logger: zaptest.NewLogger(t)})
	m.Claimed("q", nil, 0)
	f := scrape(t, serve(t, m))
	require.Zero(t, f.value(t, "fila_stats_up"))
	require.Nil(t, f.metric("fila_jobs"), "no gauge of a table that could not be read")
	require.Equal(t, 1.0, f.value(t, "fila_claims_empty_total", "queue", "q"))
}

// TestLabelValuesTheRuntimeMayAdd: a wake reason or an outcome this build
// does not know of is still counted, under its own name.
func TestLabelValuesTheRuntimeMayAdd(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	m.Woken("q", "gossip")
	m.Finished(&runtime.Job{Kind: "k"}, "vanished", time.Second)
	m.Finished(&runtime.Job{Kind: "k"}, runtime.OutcomeCompleted, 2*time.Second)
	m.Finished(&runtime.Job{Kind: "k"}, runtime.OutcomeReleased, time.Second)
	f := scrape(t, serve(t, m))
	require.Equal(t, 1.0, f.value(t, "fila_wakeups_total", "queue", "q", "reason", "gossip"))
	require.Equal(t, 1.0, f.value(t, "fila_job_outcomes_total", "kind", "k", "outcome", "vanished"))
	run := f.histogram(t, "fila_job_run_duration_seconds", "kind", "k")
	require.EqualValues(t, 1, run.GetSampleCount(), "only the handler that returned by itself is timed")
	require.Equal(t, 2.0, run.GetSampleSum())
	require.Nil(t, f.metric("fila_wake_source_up"), "no runtime attached")
	require.Nil(t, f.metric("fila_stats_up"), "no database given")
}

// TestPickupBucketsResolveEachWayOfFindingAJob: the default buckets tell a
// notification (about 2 ms) from a poll (50 ms to 1 s) from the safety poll
// (30 s): each lands in a bucket of its own.
func TestPickupBucketsResolveEachWayOfFindingAJob(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	waits := []time.Duration{400 * time.Microsecond, 2 * time.Millisecond, 50 * time.Millisecond,
		200 * time.Millisecond, time.Second, 30 * time.Second}
	for _, w := range waits {
		m.Claimed("q", []*runtime.Job{{Wait: w}}, 0)
	}
	h := scrape(t, serve(t, m)).histogram(t, "fila_pickup_latency_seconds", "queue", "q")
	var prev uint64
	seen := map[uint64]bool{}
	for _, b := range h.GetBucket() {
		n := b.GetCumulativeCount()
		if n > prev {
			require.Equal(t, prev+1, n, "two waits share the bucket up to %v s", b.GetUpperBound())
			seen[n] = true
		}
		prev = n
	}
	require.Len(t, seen, len(waits))
	require.Equal(t, 0.0005, h.GetBucket()[0].GetUpperBound())
}
