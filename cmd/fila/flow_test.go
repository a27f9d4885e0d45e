package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A duplicate unique job, enqueued from the command line, from Go and by
// plain SQL, leaves one row; the command prints the existing id and says so
// on stderr.
func TestEnqueueUniqueKey(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	out, errOut, code := fila(t, db, "enqueue", "--kind", "noop", "--unique-key", "report-2026-12")
	require.Zero(t, code, errOut)
	id := strings.TrimSpace(out)
	require.Empty(t, errOut)

	out, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--unique-key", "report-2026-12")
	require.Zero(t, code, errOut)
	require.Equal(t, id+"\n", out)
	require.Contains(t, errOut, "duplicate: job "+id)
	require.Contains(t, errOut, "is pending; nothing was inserted")

	res, err := runtime.InsertJob(ctx, db.Pool, "noop", nil, &runtime.InsertOpts{UniqueKey: "report-2026-12"})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	tag, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, unique_key) VALUES ('noop', 'report-2026-12')
		ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL AND state = ANY (coalesce(unique_states, '{pending,running}'::text[]))
		DO NOTHING`)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE unique_key = 'report-2026-12'`).Scan(&n))
	require.Equal(t, 1, n)

	_, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--unique-key", "k", "--unique-states", "running")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "must include pending")
	_, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--unique-states", "pending")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--unique-states needs --unique-key")
}

func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	out, errOut, code := fila(t, db, "queue", "paused")
	require.Zero(t, code, errOut)
	require.Equal(t, "no queue is paused\n", out)

	// A queue no worker has served and no job is in is likely a typo:
	// refused, naming the queues that are known, unless forced.
	out, errOut, code = fila(t, db, "queue", "pause", "mail")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, "fila queue: queue mail is not in use: no worker has served it, no job is pending or running in it, and no recurring task enqueues into it (no queue is known yet); add --force to pause it anyway\n", errOut)
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_kinds (queue, kind) VALUES ('mail', 'send'), ('reports', 'render')`)
	require.NoError(t, err)
	_, errOut, code = fila(t, db, "queue", "pause", "mial")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "queue mial is not in use: no worker has served it, no job is pending or running in it, and no recurring task enqueues into it (known queues: mail, reports); add --force to pause it anyway\n")
	paused, err := runtime.PausedQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, paused, "a refused pause changes nothing")
	// A pending job, or a recurring task, puts a queue in use too.
	_, err = runtime.Insert(ctx, db.Pool, "x", nil, &runtime.InsertOpts{Queue: "webhooks"})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_recurring (task, schedule, kind, queue) VALUES ('nightly', '0 2 * * *', 'report', 'nightly-reports')`)
	require.NoError(t, err)
	for _, q := range []string{"webhooks", "nightly-reports"} {
		out, errOut, code = fila(t, db, "queue", "pause", q)
		require.Zero(t, code, errOut)
		require.Contains(t, out, "paused queue "+q)
	}
	out, errOut, code = fila(t, db, "queue", "pause", "--force", "future")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "paused queue future")
	for _, q := range []string{"webhooks", "nightly-reports", "future"} {
		_, errOut, code = fila(t, db, "queue", "resume", q)
		require.Zero(t, code, errOut)
	}
	_, errOut, code = fila(t, db, "queue", "resume", "--force", "mail")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--force is for pause only")

	out, errOut, code = fila(t, db, "queue", "pause", "mail")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "paused queue mail")
	out, _, _ = fila(t, db, "queue", "paused")
	require.Equal(t, "mail\n", out)
	out, errOut, code = fila(t, db, "stats")
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^\s*mail\s+\d+s\s+0\s+0\s+0s\s+0\s*$`, out, "a paused queue without jobs is listed, apart")
	require.Contains(t, out, "queue mail: its pending jobs wait until `fila queue resume mail`")
	paused, err = runtime.PausedQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"mail"}, paused)
	out, _, code = fila(t, db, "queue", "resume", "mail")
	require.Zero(t, code)
	require.Contains(t, out, "resumed queue mail")
	out, _, _ = fila(t, db, "queue", "resume", "mail")
	require.Equal(t, "queue mail was not paused\n", out)
	_, errOut, code = fila(t, db, "queue", "pause", "no spaces")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "queue name")
	_, errOut, code = fila(t, db, "queue", "stop", "mail")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "not pause, resume or paused")
}

// recurring list shows each task with its live schedulers; a task none
// schedules is shown orphaned, without a next slot it will not keep, and
// can then (only then) be deleted.
func TestRecurringList(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	out, errOut, code := fila(t, db, "recurring", "list")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "no recurring task")
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_recurring (task, schedule, time_zone, kind, last_slot, last_job_id, next_slot)
		VALUES ('nightly', '0 2 * * *', 'Europe/Lisbon', 'report', '2026-11-30T02:00:00Z', 7, '2026-12-01T02:00:00Z');
		INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, recurring)
		VALUES ('h/1/a', 'h', 1, '{default}', '{report}', 'notify', 'up', interval '5 seconds', '{nightly}')`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "recurring", "list")
	require.Zero(t, code, errOut)
	fields := row(t, out, "nightly")
	require.Equal(t, []string{"nightly", "0", "2", "*", "*", "*", "Europe/Lisbon", "report", "default", "latest",
		"2026-11-30T02:00:00Z", "7", "2026-12-01T02:00:00Z", "1"}, fields)
	require.NotContains(t, out, "orphaned")
	out, _, code = fila(t, db, "recurring", "list", "--json")
	require.Zero(t, code)
	var tasks []runtime.RecurringTaskState
	require.NoError(t, json.Unmarshal([]byte(out), &tasks))
	require.Len(t, tasks, 1)
	require.Equal(t, "nightly", tasks[0].Name)
	require.Equal(t, 1, tasks[0].Schedulers)
	require.False(t, tasks[0].Orphaned)
	_, errOut, code = fila(t, db, "recurring", "delete", "nightly")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `recurring task "nightly": a live worker schedules it (h/1/a): remove it from their configuration and restart them first`)

	// Its worker missed three refreshes: the task is orphaned.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_workers SET last_seen_at = now() - interval '16 seconds'`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "recurring", "list")
	require.Zero(t, code, errOut)
	fields = row(t, out, "nightly")
	require.Equal(t, []string{"-", "0", "(orphaned)"}, fields[len(fields)-3:], "no next slot is promised")
	require.Contains(t, out, "task nightly is orphaned: no live worker schedules it, so no job is enqueued for it; start a worker that declares it, or forget it with fila recurring delete nightly\n")
	out, _, code = fila(t, db, "recurring", "list", "--json")
	require.Zero(t, code)
	require.NoError(t, json.Unmarshal([]byte(out), &tasks))
	require.True(t, tasks[0].Orphaned)
	require.Zero(t, tasks[0].Schedulers)

	out, errOut, code = fila(t, db, "recurring", "delete", "nightly")
	require.Zero(t, code, errOut)
	require.Equal(t, "deleted recurring task nightly; its jobs stay\n", out)
	out, _, _ = fila(t, db, "recurring", "list")
	require.Contains(t, out, "no recurring task")
	_, errOut, code = fila(t, db, "recurring", "delete", "nightly")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no recurring task is named "nightly"`)
	_, errOut, code = fila(t, db, "recurring", "delete")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "delete takes one task name")
}
