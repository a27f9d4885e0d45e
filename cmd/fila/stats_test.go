package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/internal/testdb"
)

// handWritten is a table as other programs and operators leave it: rows
// written by plain SQL in every state the constraints allow, with every
// column that may be NULL left NULL somewhere, kinds and errors with
// whitespace, and JSON null payloads.
const handWritten = `INSERT INTO fila_jobs
	(queue, kind, payload, state, run_at, attempts, max_attempts, lease_until, last_error, started_at, finished_at) VALUES
	-- orders: a backlog, a retry waiting out its backoff, two running, history.
	('orders', 'invoice', 'null', 'pending', now() - interval '90 seconds', 0, 5, NULL, NULL, NULL, NULL),
	('orders', 'invoice', '{}', 'pending', now() - interval '5 seconds', 0, 5, NULL, NULL, NULL, NULL),
	('orders', 'invoice', '{"at": "later"}', 'pending', now() + interval '1 hour', 0, 5, NULL, NULL, NULL, NULL),
	('orders', 'invoice', '{}', 'pending', now() + interval '30 seconds', 2, 5, NULL, 'deadlock detected', now() - interval '1 minute', NULL),
	('orders', 'invoice', '{}', 'running', now() - interval '3 seconds', 1, 5, now() + interval '30 seconds', NULL, now() - interval '2 seconds', NULL),
	('orders', 'invoice', 'null', 'running', now() - interval '1 minute', 3, 5, now() - interval '5 seconds', 'lost lease', NULL, NULL),
	('orders', 'untimed', '{}', 'completed', now(), 1, 5, NULL, NULL, NULL, now() - interval '1 second'),
	('orders', 'invoice', '{}', 'completed', now(), 1, 5, NULL, NULL, now() - interval '2100 ms', now() - interval '2 seconds'),
	('orders', 'invoice', '{}', 'completed', now(), 2, 5, NULL, 'first try failed', now() - interval '4300 ms', now() - interval '4 seconds'),
	('orders', 'invoice', '{}', 'cancelled', now(), 0, 5, NULL, NULL, NULL, now() - interval '10 seconds'),
	-- mail.v2: dead jobs with and without an error, one kind with a tab.
	('mail.v2', 'send welcome', '{}', 'dead', now(), 5, 5, NULL, E'smtp: 550 mailbox unavailable\n\tretry later', now() - interval '31 seconds', now() - interval '30 seconds'),
	('mail.v2', 'send welcome', 'null', 'dead', now(), 1, 1, NULL, NULL, NULL, now() - interval '3 seconds'),
	('mail.v2', 'sms', '{}', 'dead', now(), 3, 3, NULL, repeat('no route to carrier ', 30), now() - interval '1 hour', now() - interval '1 hour'),
	('mail.v2', 'send welcome', '{}', 'completed', now(), 1, 5, NULL, NULL, now() - interval '2 hours', now() - interval '2 hours'),
	('mail.v2', 'send welcome', '[]', 'pending', now() - interval '1 second', 0, 1, NULL, NULL, NULL, NULL),
	('mail.v2', E'tab\tkind', '{}', 'completed', now(), 1, 1, NULL, NULL, now() - interval '10 seconds', now() - interval '9 seconds')`

func seededForStats(t *testing.T) *testdb.DB {
	t.Helper()
	db := migrated(t)
	_, err := db.Pool.Exec(context.Background(), handWritten)
	require.NoError(t, err)
	return db
}

// row returns the fields of the one output line that starts with first.
func row(t *testing.T, out, first string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", first, out)
	return nil
}

func TestStatsHuman(t *testing.T) {
	t.Parallel()
	db := seededForStats(t)
	out, errOut, code := fila(t, db, "stats")
	require.Zero(t, code, errOut)
	require.Empty(t, errOut)
	require.NotContains(t, out, "\t", "text written by hand must not break the tables")

	orders := row(t, out, "orders")
	require.Len(t, orders, 8, "queue runnable scheduled oldest running past-lease waiting blocked: %v", orders)
	require.Equal(t, []string{"2", "2"}, orders[1:3])
	oldest, err := time.ParseDuration(orders[3])
	require.NoError(t, err)
	require.GreaterOrEqual(t, oldest, 90*time.Second)
	require.Less(t, oldest, 150*time.Second)
	require.Equal(t, []string{"2", "1", "0", "0"}, orders[4:])
	require.Equal(t, []string{"mail.v2", "1", "0"}, row(t, out, "mail.v2")[:3])
	require.Equal(t, []string{"0", "0", "0", "0"}, row(t, out, "mail.v2")[4:])
	require.NotContains(t, out, "Paused queues")

	require.Contains(t, out, "Completed jobs held: 5\n")
	require.NotContains(t, out, "≈")
	require.Contains(t, out, "Recent completions: 4 in the last 5m: 0.01/s")
	require.NotRegexp(t, `\dm0s|\dh0m|\.\d{3,}(ms|s|µs)\b`, out, "durations at one precision")
	require.Contains(t, out, "window: the newest 10000 completions or those of the last 5m, whichever is fewer")
	require.Equal(t, []string{"invoice", "2", "0.01", "2", "200.0", "290.0"}, row(t, out, "invoice"))
	require.Equal(t, []string{"untimed", "1", "0.00", "0", "-", "-"}, row(t, out, "untimed"))

	require.Contains(t, out, "Dead jobs per kind")
	welcome := row(t, out, "send")
	require.Equal(t, []string{"send", "welcome", "2"}, welcome[:3])
	require.Equal(t, "(none)", welcome[len(welcome)-1], "the most recent dead one has no last_error")
	sms := strings.Join(row(t, out, "sms"), " ")
	require.Contains(t, sms, "no route to carrier")
	require.True(t, strings.HasSuffix(sms, "…"), "a long error is cut: %s", sms)
	require.Equal(t, []string{"tab", "kind", "1", "0.00", "1", "1000.0", "1000.0"}, row(t, out, "tab"))

	require.Contains(t, out, "Cancelled jobs held: 1\n")
	require.Contains(t, out, "Workers: 0 live")
	require.Contains(t, out, "Notify trigger: on")
	// The server's notification queue is shared with other databases.
	require.Regexp(t, `Notification queue usage: \d+\.\d{4}%`, out)
	// No worker runs: the pending jobs are nobody's.
	require.Contains(t, out, "\nWarnings\n"+
		"  ! 4 pending jobs of kind \"invoice\" on queue orders: no live worker handles it (2 due now)\n"+
		"  ! 1 pending job of kind \"send welcome\" on queue mail.v2: no live worker handles it\n\n")
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	db := seededForStats(t)
	out, errOut, code := fila(t, db, "stats", "--json")
	require.Zero(t, code, errOut)
	var s stats.Snapshot
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	require.Len(t, s.Queues, 2)
	require.Equal(t, "mail.v2", s.Queues[0].Queue)
	require.Equal(t, int64(1), s.Queues[0].Runnable)
	require.Equal(t, "orders", s.Queues[1].Queue)
	require.Equal(t, int64(1), s.Queues[1].ExpiredLeases)
	require.Equal(t, stats.Completed{Jobs: 5, Estimate: false}, s.Completed)
	require.Equal(t, int64(4), s.Recent.Jobs)
	require.Len(t, s.Dead, 2)
	require.Equal(t, int64(3), s.DeadJobs())
	require.Equal(t, int64(1), s.Cancelled)

	// The raw document: estimate is a boolean, lists are [] and a run time
	// that cannot be known is null.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	require.Equal(t, false, raw["completed"].(map[string]any)["estimate"])
	require.Equal(t, []any{}, raw["workers"])
	require.Equal(t, []any{
		`4 pending jobs of kind "invoice" on queue orders: no live worker handles it (2 due now)`,
		`1 pending job of kind "send welcome" on queue mail.v2: no live worker handles it`,
	}, raw["warnings"])
	require.Equal(t, []any{
		map[string]any{"queue": "orders", "kind": "invoice", "pending": 4.0, "runnable": 2.0, "handled_on": []any{}},
		map[string]any{"queue": "mail.v2", "kind": "send welcome", "pending": 1.0, "runnable": 1.0, "handled_on": []any{}},
	}, raw["unhandled"])
	require.Equal(t, []any{}, raw["orphaned_tasks"])
	for _, k := range raw["recent"].(map[string]any)["kinds"].([]any) {
		k := k.(map[string]any)
		if k["kind"] == "untimed" {
			require.Nil(t, k["p50_ms"])
			require.Contains(t, k, "p50_ms")
		}
	}

	empty := migrated(t)
	out, errOut, code = fila(t, empty, "stats", "--json")
	require.Zero(t, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	for _, key := range []string{"queues", "dead", "workers", "warnings", "unhandled", "orphaned_tasks"} {
		require.Equal(t, []any{}, raw[key], "%s of an empty table", key)
	}
	require.NotContains(t, out, "null\n", "no list prints null")
}

func TestStatsCheck(t *testing.T) {
	t.Parallel()
	db := seededForStats(t)

	out, errOut, code := fila(t, db, "stats", "--check", "--max-dead", "2", "--max-oldest", "60s", "--max-notify-queue", "0.5")
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "one line per breached threshold:\n%s", out)
	require.Equal(t, `dead jobs: 3 > 2 ("send welcome" 2, "sms" 1)`, lines[0])
	require.Regexp(t, `^oldest runnable job: waited 1m[3-5]\ds in queue "orders" > 1m$`, lines[1])
	require.Equal(t, "fila stats: check failed: 2 threshold(s) breached\n", errOut)

	out, errOut, code = fila(t, db, "stats", "--check", "--max-dead", "3", "--max-oldest", "10m", "--max-notify-queue", "0.5")
	require.Zero(t, code, errOut)
	require.Empty(t, errOut)
	// The server's notification queue is shared with other databases.
	require.Regexp(t, `^ok: dead jobs 3 \(max 3\), oldest runnable job waited 1m[3-5]\ds \(max 10m\), notification queue usage [\d.e-]+ \(max 0.5\)\n$`, out)

	out, errOut, code = fila(t, db, "stats", "--check", "--json", "--max-notify-queue", "1", "--max-dead", "0")
	require.Equal(t, 1, code, errOut)
	var doc struct {
		stats.Snapshot
		Check struct {
			Breaches []string `json:"breaches"`
			Summary  string   `json:"summary"`
		} `json:"check"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Equal(t, []string{`dead jobs: 3 > 0 ("send welcome" 2, "sms" 1)`}, doc.Check.Breaches)
	require.Regexp(t, `^dead jobs 3 \(max 0\), notification queue usage [\d.e-]+ \(max 1\)$`, doc.Check.Summary)
	require.Len(t, doc.Queues, 2)

	// Pending jobs no live worker handles, with a limit of their own.
	out, errOut, code = fila(t, db, "stats", "--check", "--max-unhandled", "4")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, `pending jobs no live worker handles: 5 > 4 ("invoice" on orders 4, "send welcome" on mail.v2 1)`+"\n", out)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval)
		VALUES ('h/1/a', 'h', 1, '{orders}', '{invoice}', 'notify', 'up', interval '5 seconds')`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "stats", "--check", "--max-unhandled", "1")
	require.Zero(t, code, errOut)
	require.Equal(t, "ok: pending jobs no live worker handles 1 (max 1)\n", out)

	// Recurring tasks no live worker schedules.
	_, err = db.Pool.Exec(context.Background(), `INSERT INTO fila_recurring (task, schedule, kind) VALUES ('nightly', '0 2 * * *', 'report')`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "stats", "--check", "--max-orphaned-tasks", "0")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, `recurring tasks no live worker schedules: 1 > 0 ("nightly")`+"\n", out)

	// A queue paused on purpose is left out of --max-oldest, and has
	// --max-paused of its own.
	out, errOut, code = fila(t, db, "queue", "pause", "orders")
	require.Zero(t, code, errOut)
	_, err = db.Pool.Exec(context.Background(), `UPDATE fila_queues SET updated_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	out, errOut, code = fila(t, db, "stats", "--check", "--max-oldest", "60s")
	require.Zero(t, code, errOut)
	// mail.v2's job has been due for a second or so; orders' for 90 s.
	require.Regexp(t, `^ok: oldest runnable job waited \d{1,2}(\.\d+)?s \(max 1m; paused queues left out: orders\)\n$`, out)
	out, errOut, code = fila(t, db, "stats", "--check", "--max-paused", "1h")
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `^queue "orders": paused for 2h0m\d+s > 1h0m0s\n$`, out)
	out, errOut, code = fila(t, db, "stats", "--check", "--max-paused", "3h")
	require.Zero(t, code, errOut)
	require.Regexp(t, `^ok: longest pause 2h0m\d+s \(max 3h0m0s\)\n$`, out)
	out, errOut, code = fila(t, db, "stats")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "\nPaused queues (their pending jobs wait on purpose; --check --max-oldest leaves them out)\n")
	paused := row(t, out, "orders")
	require.Len(t, paused, 6, "queue, paused for, runnable, scheduled, oldest, running: %v", paused)
	require.Equal(t, []string{"2", "2"}, paused[2:4])
	require.Contains(t, out, "  queue orders: its pending jobs wait until `fila queue resume orders`\n")
	require.Equal(t, []string{"mail.v2", "1", "0"}, row(t, out, "mail.v2")[:3], "the others stay in Queues")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--check"}, "--check needs at least one of"},
		{[]string{"--max-dead", "1"}, "apply only with --check"},
		{[]string{"--check", "--max-dead", "-1"}, "--max-dead -1 is negative"},
		{[]string{"--check", "--max-oldest", "soon"}, "invalid value \"soon\" for flag -max-oldest"},
		{[]string{"--check", "--max-notify-queue", "50"}, "--max-notify-queue 50 is out of range"},
		{[]string{"--check", "--max-unhandled", "-1"}, "--max-unhandled -1 is negative"},
		{[]string{"--check", "--max-orphaned-tasks", "-2"}, "--max-orphaned-tasks -2 is negative"},
		{[]string{"--check", "--max-paused", "-1s"}, "--max-paused -1s is negative"},
		{[]string{"--max-paused", "1h"}, "apply only with --check"},
	} {
		out, errOut, code := fila(t, db, append([]string{"stats"}, c.args...)...)
		require.Equal(t, exitUsage, code, "%v", c.args)
		require.Empty(t, out)
		require.Contains(t, errOut, c.want, "%v", c.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: %s", c.args, errOut)
	}
}

func TestStatsSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, args := range [][]string{{"stats"}, {"stats", "--json"}, {"stats", "--check", "--max-dead", "0"}} {
		out, errOut, code := fila(t, db, args...)
		require.Equal(t, 1, code, "%v", args)
		require.Empty(t, out)
		require.Equal(t, "fila stats: database is not migrated: it has no Fila tables; run `fila migrate`\n", errOut)
	}
}

func TestStatsWorkers(t *testing.T) {
	t.Parallel()
	db := seededForStats(t)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_workers
		(id, host, pid, queues, kinds, mode, wake_source, wake_error, started_at, last_seen_at) VALUES
		('h1/100/aa', 'h1', 100, '{orders}', '{invoice}', 'notify', 'up', NULL, now() - interval '1 hour', now() - interval '10 seconds'),
		('h2/200/bb', 'h2', 200, '{orders,mail.v2}', '{invoice}', 'wal', 'down', E'create replication slot:\ntimeout', now(), now()),
		('h3/300/cc', 'h3', 300, '{orders}', '{invoice}', 'notify', 'up', NULL, now() - interval '2 hours', now() - interval '16 minutes');
		ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify`)
	require.NoError(t, err)

	out, errOut, code := fila(t, db, "stats")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "\nWarnings\n  ! 1 pending job of kind \"send welcome\" on queue mail.v2: no live worker handles it\n"+
		"  ! worker h2/200/bb (h2, pid 200): its wal wake source is down (create replication slot: timeout); it finds new jobs only by polling\n"+
		"  ! the notify trigger is off while 1 live worker(s) run in notify mode (h1/100/aa): they find new jobs only by their safety poll; run `fila trigger on`, or restart them with --mode wal\n")
	require.Contains(t, out, "Workers: 2 live, 1 gone (missed 3 refreshes of their row: killed, frozen or cut off)\n")
	require.Equal(t, []string{"h1/100/aa", "h1", "100", "notify", "up", "orders"}, row(t, out, "h1/100/aa")[:6])
	h2 := strings.Join(row(t, out, "h2/200/bb"), " ")
	require.Contains(t, h2, "wal down: create replication slot: timeout orders,mail.v2")
	require.Contains(t, out, "Notify trigger: off")
	require.NotContains(t, out, "\t")

	out, errOut, code = fila(t, db, "stats", "--json")
	require.Zero(t, code, errOut)
	var s stats.Snapshot
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	require.Len(t, s.Workers, 2)
	require.Equal(t, 1, s.GoneWorkers)
	require.Len(t, s.Warnings, 3)
	require.False(t, s.NotifyTrigger)

	// Warnings are not thresholds: --check stays about what it was asked.
	out, errOut, code = fila(t, db, "stats", "--check", "--max-dead", "3")
	require.Zero(t, code, errOut)
	require.Equal(t, "ok: dead jobs 3 (max 3)\n", out)
}
