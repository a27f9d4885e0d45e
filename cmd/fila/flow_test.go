package main

import (
	"context"
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
	out, errOut, code := fila(t, db, "queue", "paused")
	require.Zero(t, code, errOut)
	require.Equal(t, "no queue is paused\n", out)
	out, errOut, code = fila(t, db, "queue", "pause", "mail")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "paused queue mail")
	out, _, _ = fila(t, db, "queue", "paused")
	require.Equal(t, "mail\n", out)
	out, errOut, code = fila(t, db, "stats")
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^\s*mail\s+0\s+0\s+0s\s+0\s+0\s+yes\s*$`, out, "a paused queue without jobs is listed")
	require.Contains(t, out, "queue mail is paused: its pending jobs wait until `fila queue resume mail`")
	paused, err := runtime.PausedQueues(context.Background(), db.Pool)
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

func TestRecurringList(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	out, errOut, code := fila(t, db, "recurring", "list")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "no recurring task")
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_recurring (task, schedule, time_zone, kind, last_slot, last_job_id, next_slot)
		VALUES ('nightly', '0 2 * * *', 'Europe/Lisbon', 'report', '2026-11-30T02:00:00Z', 7, '2026-12-01T02:00:00Z')`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "recurring", "list")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "nightly")
	require.Contains(t, out, "0 2 * * *")
	require.Contains(t, out, "Europe/Lisbon")
	require.Contains(t, out, "2026-11-30T02:00:00Z")
	require.Contains(t, out, "2026-12-01T02:00:00Z")
	out, _, code = fila(t, db, "recurring", "list", "--json")
	require.Zero(t, code)
	require.Contains(t, out, `"name": "nightly"`)
}
