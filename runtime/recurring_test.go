package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func noop(context.Context, *runtime.Job) error { return nil }

// Three runtimes scheduling the same every-second task enqueue exactly one
// job per second: no slot twice, none skipped.
func TestRecurringTaskOneJobPerSlotAcrossRuntimes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	task := runtime.RecurringTask{Name: "tick", Schedule: "@every 1s", Kind: "tick", Payload: map[string]int{"n": 1}}
	var rts []*runtime.Runtime
	began := time.Now()
	for i := 0; i < 3; i++ {
		cfg := baseConfig(t, db, runtime.Kind{Name: "tick", Handler: noop})
		cfg.Recurring = []runtime.RecurringTask{task}
		rts = append(rts, start(t, cfg))
	}
	time.Sleep(5 * time.Second) // let the schedule run: the measured span
	for _, rt := range rts {
		require.NoError(t, rt.Stop(ctx))
	}
	span := time.Since(began)
	rows, err := db.Pool.Query(ctx, `SELECT unique_key, created_at FROM fila_jobs WHERE kind = 'tick' ORDER BY unique_key`)
	require.NoError(t, err)
	var keys []string
	var created []time.Time
	for rows.Next() {
		var k string
		var c time.Time
		require.NoError(t, rows.Scan(&k, &c))
		keys = append(keys, k)
		created = append(created, c)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(keys), 4, "about one job a second for five seconds")
	require.LessOrEqual(t, len(keys), int(span/time.Second)+1, "at most one job per second the runtimes ran (%s)", span)
	// Consecutive seconds, each once.
	var prev time.Time
	for i, k := range keys {
		slot, err := time.Parse(time.RFC3339, k[len("fila:recurring:tick:"):])
		require.NoError(t, err, k)
		if i > 0 {
			require.Equal(t, time.Second, slot.Sub(prev), "slots %v", keys)
		}
		prev = slot
		require.WithinDuration(t, slot, created[i], 2*time.Second, "enqueued near its slot")
	}
	tasks, err := runtime.RecurringTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "tick", tasks[0].Name)
	require.NotNil(t, tasks[0].LastSlot)
	require.Equal(t, prev, tasks[0].LastSlot.UTC())
	require.NotNil(t, tasks[0].NextSlot)
	require.True(t, tasks[0].NextSlot.After(*tasks[0].LastSlot))
}

// After downtime a task enqueues its most recent missed slot only
// (MissedLatest), or none of them (MissedNone).
func TestRecurringMissedSlots(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	// Both tasks last ran three hours ago, every minute.
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_recurring (task, schedule, kind, last_slot) VALUES
		('latest', '@every 1m', 'k', date_trunc('minute', now()) - interval '3 hours'),
		('none', '@every 1m', 'k', date_trunc('minute', now()) - interval '3 hours')`)
	require.NoError(t, err)
	cfg := baseConfig(t, db, runtime.Kind{Name: "other", Handler: noop})
	cfg.Recurring = []runtime.RecurringTask{
		{Name: "latest", Schedule: "@every 1m", Kind: "k"},
		{Name: "none", Schedule: "@every 1m", Kind: "k", Missed: runtime.MissedNone},
	}
	start(t, cfg)
	waitFor(t, 30*time.Second, "the latest missed slot enqueued", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE unique_key LIKE 'fila:recurring:latest:%'`).Scan(&n))
		return n == 1
	})
	var slot, now time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_slot, now() FROM fila_recurring WHERE task = 'latest'`).Scan(&slot, &now))
	require.Less(t, now.Sub(slot), time.Minute, "the most recent slot, not an old one")
	tasks, err := runtime.RecurringTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE unique_key LIKE 'fila:recurring:none:%'`).Scan(&n))
	// The "none" task's missed slots were all more than a minute late,
	// but its latest slot may have been less than a minute ago.
	require.LessOrEqual(t, n, 1)
	if n == 1 {
		var late time.Duration
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT created_at - last_slot FROM fila_jobs j
			JOIN fila_recurring r ON r.last_job_id = j.id WHERE r.task = 'none'`).Scan(&late))
		require.Less(t, late, time.Minute)
	}
}

func TestRecurringTaskValidation(t *testing.T) {
	t.Parallel()
	base := runtime.Config{DSN: "postgres://localhost/x", Kinds: []runtime.Kind{{Name: "k", Handler: noop}}}
	for name, tc := range map[string]struct {
		task runtime.RecurringTask
		want string
	}{
		"no name":       {runtime.RecurringTask{Schedule: "@every 1s", Kind: "k"}, "empty Name"},
		"bad cron":      {runtime.RecurringTask{Name: "a", Schedule: "61 * * * *", Kind: "k"}, `schedule "61 * * * *"`},
		"six fields":    {runtime.RecurringTask{Name: "a", Schedule: "0 0 * * * *", Kind: "k"}, "schedule"},
		"every 1.5s":    {runtime.RecurringTask{Name: "a", Schedule: "@every 1500ms", Kind: "k"}, "whole number of seconds"},
		"bad zone":      {runtime.RecurringTask{Name: "a", Schedule: "@daily", TimeZone: "Mars/Base", Kind: "k"}, "TimeZone"},
		"zone in spec":  {runtime.RecurringTask{Name: "a", Schedule: "CRON_TZ=UTC @daily", Kind: "k"}, "TimeZone"},
		"no kind":       {runtime.RecurringTask{Name: "a", Schedule: "@daily"}, "kind is empty"},
		"bad queue":     {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", Queue: "a b"}, "queue name"},
		"bad missed":    {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", Missed: "all"}, "Missed"},
		"bad payload":   {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", Payload: []byte("{")}, "not valid JSON"},
		"bad attempts":  {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", MaxAttempts: -1}, "max attempts"},
		"cron and zone": {runtime.RecurringTask{Name: "a", Schedule: "30 9 * * 1-5", TimeZone: "America/Sao_Paulo", Kind: "k"}, ""},
	} {
		cfg := base
		cfg.Recurring = []runtime.RecurringTask{tc.task}
		_, err := runtime.New(cfg)
		if tc.want == "" {
			require.NoError(t, err, name)
			continue
		}
		require.ErrorContains(t, err, "Recurring", name)
		require.ErrorContains(t, err, tc.want, name)
	}
	cfg := base
	cfg.Recurring = []runtime.RecurringTask{{Name: "a", Schedule: "@daily", Kind: "k"}, {Name: "a", Schedule: "@hourly", Kind: "k"}}
	_, err := runtime.New(cfg)
	require.ErrorContains(t, err, "declared twice")
}
