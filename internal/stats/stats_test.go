package stats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

func migrated(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := migrations.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	return db
}

func exec(t *testing.T, db *testdb.DB, sql string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql)
	require.NoError(t, err)
}

// Rows written by hand in every state, with every column the constraints
// allow to be NULL left NULL somewhere.
func TestCollectCountsEveryState(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	exec(t, db, `INSERT INTO fila_jobs (queue, kind, payload, state, run_at, attempts, max_attempts, lease_until, last_error, started_at, finished_at) VALUES
		('a', 'k', 'null', 'pending', now() - interval '10 seconds', 0, 5, NULL, NULL, NULL, NULL),
		('a', 'k', '{}', 'pending', now() + interval '1 hour', 2, 5, NULL, 'timeout', now() - interval '1 minute', NULL),
		('a', 'k', '{}', 'running', now(), 1, 5, now() + interval '30 seconds', NULL, now() - interval '1 second', NULL),
		('b', 'mail', '{}', 'running', now(), 1, 5, now() - interval '1 second', NULL, NULL, NULL),
		('a', 'k', '{}', 'completed', now(), 1, 5, NULL, NULL, NULL, now()),
		('a', 'k', '{}', 'completed', now(), 1, 5, NULL, NULL, now() - interval '200 ms', now()),
		('b', 'mail', '{}', 'dead', now(), 5, 5, NULL, 'smtp refused', now() - interval '61 seconds', now() - interval '1 minute'),
		('b', 'mail', '{}', 'dead', now(), 1, 1, NULL, NULL, NULL, now() - interval '2 seconds'),
		('b', 'sms', 'null', 'dead', now(), 3, 3, NULL, 'no route', now(), now() - interval '1 hour'),
		('c', 'k', '{}', 'cancelled', now(), 0, 5, NULL, NULL, NULL, now())`)
	// b is paused; so is idle, which has no job; resumed was paused once.
	exec(t, db, `INSERT INTO fila_queues (queue, paused) VALUES ('b', true), ('idle', true), ('resumed', false)`)

	s, err := stats.Collect(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Len(t, s.Queues, 3, "queues with pending or running jobs, and paused ones")
	a, b := s.Queues[0], s.Queues[1]
	require.InDelta(t, 10, a.OldestRunnableSeconds, 5)
	a.OldestRunnableSeconds = 0
	require.Equal(t, stats.Queue{Queue: "a", Runnable: 1, Scheduled: 1, Running: 1}, a)
	require.Less(t, b.PausedSeconds, 60.0)
	b.PausedSeconds = 0
	require.Equal(t, stats.Queue{Queue: "b", Running: 1, ExpiredLeases: 1, Paused: true}, b)
	idle := s.Queues[2]
	idle.PausedSeconds = 0
	require.Equal(t, stats.Queue{Queue: "idle", Paused: true}, idle)
	q, age := s.OldestRunnable()
	require.Equal(t, "a", q)
	require.Greater(t, age, 9.0)

	require.Equal(t, stats.Completed{Jobs: 2}, s.Completed)
	require.Equal(t, int64(2), s.Recent.Jobs)
	require.False(t, s.Recent.LimitedByJobs)
	require.Equal(t, stats.DefaultWindow.Age.Seconds(), s.Recent.SpanSeconds)
	require.Len(t, s.Recent.Kinds, 1)
	k := s.Recent.Kinds[0]
	require.Equal(t, "k", k.Kind)
	require.Equal(t, int64(2), k.Jobs)
	require.Equal(t, int64(1), k.Timed, "the row without started_at has no run time")
	require.NotNil(t, k.P95Ms)
	require.InDelta(t, 200, *k.P50Ms, 0.01)
	require.InDelta(t, 200, *k.P95Ms, 0.01)

	require.Len(t, s.Dead, 2)
	require.Equal(t, "mail", s.Dead[0].Kind)
	require.Equal(t, int64(2), s.Dead[0].Dead)
	require.Equal(t, "", s.Dead[0].LastError, "the most recent dead mail job has no last_error")
	require.NotNil(t, s.Dead[0].LastAt)
	require.WithinDuration(t, s.At.Add(-2*time.Second), *s.Dead[0].LastAt, 2*time.Second)
	require.Equal(t, "sms", s.Dead[1].Kind)
	require.Equal(t, "no route", s.Dead[1].LastError)
	require.Equal(t, int64(3), s.DeadJobs())
	require.Equal(t, []stats.QueueDead{{Queue: "b", Dead: 3}}, s.DeadByQueue)
	require.Equal(t, int64(1), s.Cancelled)

	require.True(t, s.NotifyTrigger)
	require.GreaterOrEqual(t, s.NotificationQueueUsage, 0.0)
	// No worker runs: the pending jobs are nobody's.
	require.Equal(t, []stats.Unhandled{{Queue: "a", Kind: "k", Pending: 2, Runnable: 1, HandledOn: []string{}}}, s.Unhandled)
	require.Equal(t, []string{`2 pending jobs of kind "k" on queue a: no live worker handles it (1 due now)`}, s.Warnings)
}

// An empty table gives empty lists, which JSON shows as [], not null.
func TestCollectEmpty(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	s, err := stats.Collect(context.Background(), db.Pool)
	require.NoError(t, err)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, key := range []string{"queues", "dead", "dead_by_queue", "workers", "warnings", "unhandled", "orphaned_tasks"} {
		require.Equal(t, []any{}, m[key], key)
	}
	require.Equal(t, []any{}, m["recent"].(map[string]any)["kinds"])
	q, age := s.OldestRunnable()
	require.Equal(t, "", q)
	require.Zero(t, age)
}

// The recent window stops at whichever bound comes first, and says which.
func TestCollectRecentWindow(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	// One completion a second for the last minute, each run for i ms.
	exec(t, db, `INSERT INTO fila_jobs (kind, state, attempts, started_at, finished_at)
		SELECT CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, 'completed', 1,
			now() - i * interval '1 second' - i * interval '1 ms', now() - i * interval '1 second'
		FROM generate_series(0, 59) i`)
	ctx := context.Background()

	s, err := stats.CollectWindow(ctx, db.Pool, stats.Window{Jobs: 10, Age: time.Hour})
	require.NoError(t, err)
	r := s.Recent
	require.True(t, r.LimitedByJobs)
	require.Equal(t, int64(10), r.Jobs)
	require.InDelta(t, 9, r.SpanSeconds, 1, "back to the 10th newest, finished 9 s before the insert")
	require.InDelta(t, 10/r.SpanSeconds, r.PerSecond, 1e-9)
	require.Len(t, r.Kinds, 2)
	for _, k := range r.Kinds {
		require.Equal(t, int64(5), k.Jobs)
		require.Equal(t, int64(5), k.Timed)
	}
	// even: 0, 2, 4, 6, 8 ms; odd: 1, 3, 5, 7, 9 ms.
	require.Equal(t, "even", r.Kinds[0].Kind)
	require.InDelta(t, 4, *r.Kinds[0].P50Ms, 0.01)
	require.InDelta(t, 7.6, *r.Kinds[0].P95Ms, 0.01)

	s, err = stats.CollectWindow(ctx, db.Pool, stats.Window{Jobs: 1000, Age: 20 * time.Second})
	require.NoError(t, err)
	r = s.Recent
	require.False(t, r.LimitedByJobs)
	require.InDelta(t, 20, r.Jobs, 2)
	require.Equal(t, 20.0, r.SpanSeconds)
	require.InDelta(t, float64(r.Jobs)/20, r.PerSecond, 1e-9)

	_, err = stats.CollectWindow(ctx, db.Pool, stats.Window{Jobs: 0, Age: time.Minute})
	require.ErrorContains(t, err, "must be positive")
}

// Past CompletedExactUpTo rows the completed count is an estimate, which
// follows the table's growth between two ANALYZEs.
func TestCompletedEstimate(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	insert := func(n int) {
		exec(t, db, fmt.Sprintf(`INSERT INTO fila_jobs (kind, state, attempts, started_at, finished_at)
			SELECT 'k', 'completed', 1, now(), now() - i * interval '1 ms' FROM generate_series(1, %d) i`, n))
	}
	n := stats.CompletedExactUpTo + 20_000
	insert(n)
	s, err := stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, s.Completed.Estimate)
	require.GreaterOrEqual(t, s.Completed.Jobs, int64(stats.CompletedExactUpTo+1), "never less than what was counted")

	exec(t, db, "ANALYZE fila_jobs")
	s, err = stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, s.Completed.Estimate)
	require.InEpsilon(t, n, s.Completed.Jobs, 0.1)

	// Twice as many rows, no ANALYZE since: the estimate scales with the index.
	insert(n)
	s, err = stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.InEpsilon(t, 2*n, s.Completed.Jobs, 0.15)
}

func TestCollectSaysToMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := stats.Collect(ctx, testdb.New(t).Pool)
	require.True(t, errors.Is(err, migrations.ErrNotMigrated), "got %v", err)
	require.ErrorContains(t, err, "run `fila migrate`")

	// A database left at an older version.
	old := testdb.New(t)
	all, err := migrations.All()
	require.NoError(t, err)
	exec(t, old, all[0].Up)
	exec(t, old, `CREATE TABLE fila_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO fila_migrations (version, name) VALUES (1, 'jobs')`)
	_, err = stats.Collect(ctx, old.Pool)
	require.True(t, errors.Is(err, migrations.ErrNotMigrated), "got %v", err)
	require.ErrorContains(t, err, "it is at version 1")
	require.ErrorContains(t, err, "run `fila migrate`")

	db := migrated(t)
	exec(t, db, "DROP TABLE fila_jobs CASCADE")
	_, err = stats.Collect(ctx, db.Pool)
	require.True(t, errors.Is(err, migrations.ErrNotMigrated), "got %v", err)
	require.ErrorContains(t, err, `relation "fila_jobs" does not exist; run `+"`fila migrate`")
}

func TestCheck(t *testing.T) {
	t.Parallel()
	s := &stats.Snapshot{
		Queues: []stats.Queue{
			{Queue: "a", Runnable: 3, OldestRunnableSeconds: 75.25},
			{Queue: "b", Runnable: 1, OldestRunnableSeconds: 2},
			{Queue: "idle", OldestRunnableSeconds: 0},
			// Paused on purpose: its wait is no one's delay.
			{Queue: "held", Runnable: 9, OldestRunnableSeconds: 7200, Paused: true, PausedSeconds: 7260.4},
		},
		Dead: []stats.KindDead{
			{Kind: "mail", Dead: 10}, {Kind: "sms", Dead: 3}, {Kind: "push\nnotify", Dead: 2}, {Kind: "x", Dead: 1},
		},
		NotificationQueueUsage: 0.625,
	}
	i64 := func(v int64) *int64 { return &v }
	dur := func(v time.Duration) *time.Duration { return &v }
	f64 := func(v float64) *float64 { return &v }

	breaches, summary := s.Check(stats.Thresholds{MaxDead: i64(10), MaxOldest: dur(time.Minute), MaxNotifyQueue: f64(0.5)})
	require.Equal(t, []string{
		`dead jobs: 16 > 10 ("mail" 10, "sms" 3, "push\nnotify" 2, 1 more)`,
		`oldest runnable job: waited 1m15s in queue "a" > 1m`,
		`notification queue usage: 0.625 > 0.5`,
	}, breaches)
	require.Equal(t, "dead jobs 16 (max 10), oldest runnable job waited 1m15s (max 1m; paused queues left out: held), notification queue usage 0.625 (max 0.5)", summary)

	// Each limit is the largest value still fine.
	breaches, _ = s.Check(stats.Thresholds{MaxDead: i64(16), MaxOldest: dur(76 * time.Second), MaxNotifyQueue: f64(0.625)})
	require.Empty(t, breaches)
	breaches, summary = s.Check(stats.Thresholds{MaxDead: i64(15)})
	require.Len(t, breaches, 1)
	require.Equal(t, "dead jobs 16 (max 15)", summary)
	require.True(t, stats.Thresholds{}.Empty())

	// A pause has a limit of its own.
	breaches, summary = s.Check(stats.Thresholds{MaxPaused: dur(time.Hour)})
	require.Equal(t, []string{`queue "held": paused for 2h1m0s > 1h0m0s`}, breaches)
	require.Equal(t, "longest pause 2h1m0s (max 1h0m0s)", summary)
	breaches, _ = s.Check(stats.Thresholds{MaxPaused: dur(3 * time.Hour)})
	require.Empty(t, breaches)

	// Work nobody serves.
	s.Unhandled = []stats.Unhandled{{Queue: "mail", Kind: "sned", Pending: 7}, {Queue: "a", Kind: "x", Pending: 1}}
	s.OrphanedTasks = []stats.OrphanedTask{{Task: "nightly"}}
	breaches, summary = s.Check(stats.Thresholds{MaxUnhandled: i64(0), MaxOrphanedTasks: i64(0)})
	require.Equal(t, []string{
		`pending jobs no live worker handles: 8 > 0 ("sned" on mail 7, "x" on a 1)`,
		`recurring tasks no live worker schedules: 1 > 0 ("nightly")`,
	}, breaches)
	require.Equal(t, "pending jobs no live worker handles 8 (max 0), recurring tasks no live worker schedules 1 (max 0)", summary)
	breaches, _ = s.Check(stats.Thresholds{MaxUnhandled: i64(8), MaxOrphanedTasks: i64(1)})
	require.Empty(t, breaches)

	empty := &stats.Snapshot{}
	breaches, _ = empty.Check(stats.Thresholds{MaxDead: i64(0), MaxOldest: dur(0), MaxNotifyQueue: f64(0),
		MaxUnhandled: i64(0), MaxOrphanedTasks: i64(0), MaxPaused: dur(0)})
	require.Empty(t, breaches, "nothing waiting, nothing dead, nothing unserved, nothing paused")
}

// Pending jobs of a kind no live worker of their queue handles, and
// recurring tasks no live worker schedules, are listed and warned about;
// a worker that missed three refreshes serves nothing.
func TestCollectUnservedWork(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	exec(t, db, `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, last_seen_at, recurring) VALUES
		('h1/1/a', 'h1', 1, '{mail}', '{send,sms-old}', 'notify', 'up', interval '5 seconds', now(), '{}'),
		('h2/2/b', 'h2', 2, '{reports,mail}', '{report}', 'notify', 'up', interval '5 seconds', now() - interval '9 seconds', '{nightly}'),
		('h3/3/c', 'h3', 3, '{mail}', '{sms}', 'notify', 'up', interval '5 seconds', now() - interval '16 seconds', '{weekly}');
		INSERT INTO fila_jobs (queue, kind, run_at) VALUES
		('mail', 'send', now()),
		('mail', 'sned', now() - interval '1 minute'), ('mail', 'sned', now()), ('mail', 'sned', now() + interval '1 hour'),
		('mial', 'send', now()), ('mial', 'send', now()),
		('mail', 'sms', now()),
		('reports', 'report', now() + interval '1 day');
		INSERT INTO fila_recurring (task, schedule, kind, queue, last_slot, next_slot) VALUES
		('nightly', '0 2 * * *', 'report', 'reports', now() - interval '22 hours', now() + interval '2 hours'),
		('weekly', '0 3 * * 1', 'report', 'reports', NULL, now() + interval '3 days'),
		('retired', '@every 60s', 'tick', 'default', now() - interval '2 hours', now() - interval '119 minutes')`)

	s, err := stats.Collect(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, 1, s.GoneWorkers)
	require.Equal(t, []stats.Unhandled{
		{Queue: "mail", Kind: "sned", Pending: 3, Runnable: 2, HandledOn: []string{}},
		{Queue: "mial", Kind: "send", Pending: 2, Runnable: 2, HandledOn: []string{"mail"}},
		{Queue: "mail", Kind: "sms", Pending: 1, Runnable: 1, HandledOn: []string{}},
	}, s.Unhandled)
	require.Equal(t, int64(6), s.UnhandledJobs())
	require.Len(t, s.OrphanedTasks, 2)
	require.Equal(t, "retired", s.OrphanedTasks[0].Task)
	require.Equal(t, "tick", s.OrphanedTasks[0].Kind)
	require.Equal(t, "default", s.OrphanedTasks[0].Queue)
	require.Equal(t, "weekly", s.OrphanedTasks[1].Task, "its only scheduler is gone")
	require.Len(t, s.Warnings, 5)
	require.Equal(t, []string{
		`3 pending jobs of kind "sned" on queue mail: no live worker handles it (2 due now)`,
		`2 pending jobs of kind "send" on queue mial: no live worker handles it; live workers handle it on queue mail`,
		`1 pending job of kind "sms" on queue mail: no live worker handles it`,
	}, s.Warnings[:3])
	require.Regexp(t, `^recurring task "retired" \(kind "tick" on queue default\) is orphaned: no live worker schedules it, and its slot of \S+ passed 1h59m\d+s ago without a job; start a worker that declares it, or delete it \(fila recurring delete\)$`, s.Warnings[3])
	require.Equal(t, `recurring task "weekly" (kind "report" on queue reports) is orphaned: no live worker schedules it; start a worker that declares it, or delete it (fila recurring delete)`, s.Warnings[4])

	// The worker comes back: its kind and task are served again.
	exec(t, db, `UPDATE fila_workers SET last_seen_at = now() WHERE id = 'h3/3/c'`)
	s, err = stats.Collect(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Len(t, s.Unhandled, 2)
	require.Len(t, s.OrphanedTasks, 1)
}

const workers = `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, wake_error, started_at, last_seen_at) VALUES
	('h1/100/aa', 'h1', 100, '{default}', '{k}', 'notify', 'up', NULL, now() - interval '1 hour', now() - interval '10 seconds'),
	('h2/200/bb', 'h2', 200, '{orders,mail}', '{invoice}', 'wal', 'down', 'create replication slot: timeout after 10s', now() - interval '5 minutes', now() - interval '1 minute'),
	('h3/300/cc', 'h3', 300, '{default}', '{k}', 'notify', 'up', NULL, now() - interval '2 hours', now() - interval '20 minutes'),
	('h4/400/dd', 'h4', 400, '{default}', '{k}', 'poll', 'none', NULL, now(), now())`

// Live workers are listed, gone ones counted; a wake source that is down and
// notify-mode workers while the trigger is off are warned about.
func TestCollectWorkers(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	exec(t, db, workers)
	ctx := context.Background()

	s, err := stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, 1, s.GoneWorkers, "h3 was last seen 20 minutes ago")
	require.Len(t, s.Workers, 3)
	ids := []string{s.Workers[0].ID, s.Workers[1].ID, s.Workers[2].ID}
	require.Equal(t, []string{"h1/100/aa", "h2/200/bb", "h4/400/dd"}, ids)
	w := s.Workers[1]
	require.Equal(t, "h2", w.Host)
	require.Equal(t, 200, w.PID)
	require.Equal(t, []string{"orders", "mail"}, w.Queues)
	require.Equal(t, []string{"invoice"}, w.Kinds)
	require.Equal(t, "wal", w.Mode)
	require.Equal(t, "down", w.WakeSource)
	require.Equal(t, "create replication slot: timeout after 10s", w.WakeError)
	require.InDelta(t, 60, w.LastSeenSeconds, 5)
	require.Equal(t, "", s.Workers[0].WakeError)
	require.True(t, s.NotifyTrigger)
	require.Equal(t, []string{
		"worker h2/200/bb (h2, pid 200): its wal wake source is down (create replication slot: timeout after 10s); it finds new jobs only by polling",
	}, s.Warnings)

	exec(t, db, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	s, err = stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, s.NotifyTrigger)
	require.Len(t, s.Warnings, 2)
	require.Equal(t, "the notify trigger is off while 1 live worker(s) run in notify mode (h1/100/aa): they find new jobs only by their safety poll; run `fila trigger on`, or restart them with --mode wal", s.Warnings[1])
}
