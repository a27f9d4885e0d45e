package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// seedState writes a job in a state as a worker would have left it.
func seedState(t *testing.T, db *testdb.DB, kind, state string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
INSERT INTO fila_jobs (kind, state, payload, attempts, max_attempts, lease_until, started_at, finished_at, last_error)
VALUES ($1::text, $2::text, '{"to": "ana"}',
        CASE WHEN $2::text = 'pending' THEN 0 WHEN $2::text = 'dead' THEN 2 ELSE 1 END,
        2,
        CASE WHEN $2::text = 'running' THEN now() + interval '1 hour' END,
        CASE WHEN $2::text <> 'pending' THEN now() END,
        CASE WHEN $2::text IN ('completed', 'dead', 'cancelled') THEN now() END,
        CASE WHEN $2::text = 'dead' THEN 'smtp said no' END)
RETURNING id`, kind, state).Scan(&id))
	return id
}

func TestJobsListAndShow(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	pending := seedState(t, db, "mail", "pending")
	dead := seedState(t, db, "mail", "dead")
	completed := seedState(t, db, "resize", "completed")
	_, err := db.Pool.Exec(ctx, `UPDATE fila_jobs SET errors = jsonb_build_array(
    jsonb_build_object('attempt', 1, 'at', now() - interval '1 minute', 'error', 'connection refused'),
    jsonb_build_object('attempt', 2, 'at', now(), 'error', E'smtp said no\n  at line 2'))
WHERE id = $1::bigint`, dead)
	require.NoError(t, err)

	out, errOut, code := fila(t, db, "jobs", "list")
	require.Zero(t, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4)
	require.Regexp(t, `^ID\s+QUEUE\s+KIND\s+STATE\s+ATTEMPTS\s+RUN AT\s+FINISHED\s+LAST ERROR$`, lines[0])
	require.Regexp(t, fmt.Sprintf(`^%d\s+default\s+resize\s+completed\s+1/2\s`, completed), lines[1], "newest first")
	require.Regexp(t, fmt.Sprintf(`^%d\s+default\s+mail\s+dead\s+2/2\s.*smtp said no$`, dead), lines[2])
	require.Regexp(t, fmt.Sprintf(`^%d\s+default\s+mail\s+pending\s+0/2\s.*-\s*$`, pending), lines[3])

	out, errOut, code = fila(t, db, "jobs", "list", "--kind", "mail", "--json")
	require.Zero(t, code, errOut)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	require.EqualValues(t, dead, listed[0]["id"])
	require.Equal(t, "smtp said no", listed[0]["last_error"])
	require.NotContains(t, listed[0], "payload")

	out, _, code = fila(t, db, "jobs", "list", "--state", "dead")
	require.Zero(t, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2)
	out, _, code = fila(t, db, "jobs", "list", "--limit", "1")
	require.Zero(t, code)
	require.Contains(t, out, fmt.Sprintf("(the newest 1; the next page: --before %d)", completed))
	out, _, code = fila(t, db, "jobs", "list", "--limit", "1", "--before", fmt.Sprint(completed))
	require.Zero(t, code)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s`, dead), out)
	out, _, code = fila(t, db, "jobs", "list", "--queue", "nowhere")
	require.Zero(t, code)
	require.Equal(t, "no jobs\n", out)
	out, _, code = fila(t, db, "jobs", "list", "--queue", "nowhere", "--json")
	require.Zero(t, code)
	require.Equal(t, "[]\n", out)

	out, errOut, code = fila(t, db, "jobs", "show", fmt.Sprint(dead))
	require.Zero(t, code, errOut)
	for _, want := range []string{
		"state        dead",
		"attempts     2 of 2",
		"last error   smtp said no\n",
		"payload:\n  {\n    \"to\": \"ana\"\n  }\n",
		"errors, oldest first (the latest 20 are kept):\n  attempt 1 at ",
		"    connection refused\n  attempt 2 at ",
		"    smtp said no\n      at line 2\n",
	} {
		require.Contains(t, out, want)
	}
	out, errOut, code = fila(t, db, "jobs", "show", "--json", fmt.Sprint(pending))
	require.Zero(t, code, errOut)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, map[string]any{"to": "ana"}, shown["payload"])
	require.Equal(t, []any{}, shown["errors"], "an empty history is [], not missing")
	require.Equal(t, "pending", shown["state"])
	out, errOut, code = fila(t, db, "jobs", "show", fmt.Sprint(pending))
	require.Zero(t, code, errOut)
	require.Contains(t, out, "errors: none\n")

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "show", "999999"}, 1, "fila jobs show: job 999999 does not exist"},
		{[]string{"jobs", "show"}, exitUsage, "fila jobs show: give one job id"},
		{[]string{"jobs", "show", "x"}, 1, `fila jobs show: "x" is not a job id`},
		{[]string{"jobs", "list", "--state", "failed"}, 1, `--state "failed" is unknown: use held, waiting, pending, running, completed, dead, cancelled`},
		{[]string{"jobs", "frob"}, exitUsage, `unknown jobs command "frob"`},
		{[]string{"jobs", "--json", "list"}, exitUsage, "give the jobs command before its flags"},
	} {
		out, errOut, code := fila(t, db, c.args...)
		require.Equal(t, c.code, code, "%v", c.args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %s", c.args, errOut)
		require.Contains(t, errOut, c.want)
	}
	_, errOut, code = fila(t, db, "jobs")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "usage: fila jobs <command>")
}

func TestJobsRetryCancelDelete(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	state := func(id int64) string {
		var s string
		err := db.Pool.QueryRow(context.Background(), "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&s)
		if err != nil {
			return "gone"
		}
		return s
	}
	dead := seedState(t, db, "mail", "dead")
	running := seedState(t, db, "mail", "running")
	pending := seedState(t, db, "mail", "pending")
	completed := seedState(t, db, "mail", "completed")

	out, errOut, code := fila(t, db, "jobs", "retry", fmt.Sprint(dead), fmt.Sprint(running), fmt.Sprint(pending))
	require.Equal(t, 1, code, "a job left alone fails the command")
	require.Equal(t, fmt.Sprintf("job %d: retried (was dead)\n", dead), out, "one line per job done")
	require.Equal(t, fmt.Sprintf("fila jobs retry: job %d is running: cancel it first, or let it finish\n"+
		"fila jobs retry: job %d is already pending, and due\n", running, pending), errOut,
		"one line per job left alone")
	require.Equal(t, "pending", state(dead))
	require.Equal(t, "running", state(running))

	out, errOut, code = fila(t, db, "jobs", "cancel", fmt.Sprint(running), fmt.Sprint(pending))
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("job %d: cancelled (was running: its worker stops it at its next heartbeat)\njob %d: cancelled (was pending)\n", running, pending), out)
	require.Equal(t, "cancelled", state(running))
	require.Equal(t, "cancelled", state(pending))

	out, errOut, code = fila(t, db, "jobs", "cancel", "--json", fmt.Sprint(completed), "424242")
	require.Equal(t, 1, code)
	var res struct {
		Changed []any `json:"changed"`
		Skipped []struct {
			ID     int64  `json:"id"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"skipped"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.NotNil(t, res.Changed)
	require.Empty(t, res.Changed)
	require.Len(t, res.Skipped, 2)
	require.Equal(t, "completed", res.Skipped[0].State)
	require.Equal(t, "", res.Skipped[1].State)
	require.Contains(t, errOut, "job 424242 does not exist")

	out, errOut, code = fila(t, db, "jobs", "retry", "--state", "cancelled", "--kind", "mail")
	require.Zero(t, code, errOut)
	// The job cancelled while it ran is due when its attempt's lease (an
	// hour, as seeded) ends: its worker may not have stopped it before.
	require.Regexp(t, fmt.Sprintf(`^retried 2 cancelled jobs: %d, %d\n`+
		`job %d was cancelled while it ran: it runs again from \S+ \S+ \S+, once that attempt's lease has ended\n$`,
		running, pending, running), out)
	var laterBy float64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT extract(epoch FROM run_at - now()) FROM fila_jobs WHERE id = $1::bigint", running).Scan(&laterBy))
	require.Greater(t, laterBy, 3000.0)
	require.Equal(t, "pending", state(pending))
	out, errOut, code = fila(t, db, "jobs", "retry", "--state", "dead")
	require.Zero(t, code, errOut)
	require.Equal(t, "no dead jobs to retry\n", out)

	// A running job cannot be deleted; the others can.
	running2 := seedState(t, db, "mail", "running")
	out, errOut, code = fila(t, db, "jobs", "delete", fmt.Sprint(completed), fmt.Sprint(running2))
	require.Equal(t, 1, code)
	require.Equal(t, fmt.Sprintf("job %d: deleted (was completed)\n", completed), out)
	require.Equal(t, fmt.Sprintf("fila jobs delete: job %d is running: cancel it first\n", running2), errOut)
	require.Equal(t, "gone", state(completed))
	require.Equal(t, "running", state(running2))

	// Past 20 jobs left alone, one line says how many more.
	args := []string{"jobs", "delete"}
	for i := range 25 {
		args = append(args, fmt.Sprint(900000+i))
	}
	_, errOut, code = fila(t, db, args...)
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	require.Len(t, lines, 21, errOut)
	require.Equal(t, "fila jobs delete: job 900000 does not exist", lines[0])
	require.Equal(t, "fila jobs delete: and 5 more jobs left alone (--json lists every one)", lines[20])

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "retry"}, exitUsage, "give job ids, or --state dead|cancelled"},
		{[]string{"jobs", "retry", "1", "--state", "dead"}, exitUsage, "give job ids or --state, not both"},
		{[]string{"jobs", "retry", "--kind", "mail"}, exitUsage, "add --state"},
		{[]string{"jobs", "retry", "--state", "running"}, 1, `--state "running": only dead, cancelled, completed, scheduled jobs can be retried by state`},
		{[]string{"jobs", "retry", "0"}, 1, `"0" is not a job id`},
		{[]string{"jobs", "cancel"}, exitUsage, "give job ids, or --state held|waiting|pending|running|scheduled|retrying"},
		{[]string{"jobs", "cancel", "1", "--state", "pending"}, exitUsage, "give job ids or --state, not both"},
		{[]string{"jobs", "cancel", "--queue", "q"}, exitUsage, "add --state"},
		{[]string{"jobs", "cancel", "--state", "dead"}, 1, `--state "dead": only held, waiting, pending, running, scheduled or retrying jobs can be cancelled`},
		{[]string{"jobs", "delete"}, exitUsage, "give job ids, or --state dead|cancelled|held|waiting|pending|scheduled|retrying"},
		{[]string{"jobs", "delete", "--state", "running"}, 1, `--state "running": only dead, cancelled, held, waiting, pending, scheduled or retrying jobs can be deleted by state (running ones: cancel them first; completed ones: retention deletes them)`},
		{[]string{"jobs", "delete", "--state", "completed"}, 1, "completed ones: retention deletes them"},
		{[]string{"jobs", "delete", "--state", "dead", "--queue", "a b"}, 1, "--queue: "},
		{[]string{"jobs", "delete", "-5"}, exitUsage, "flag provided but not defined: -5"},
	} {
		out, errOut, code := fila(t, db, c.args...)
		require.Equal(t, c.code, code, "%v", c.args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// seedKeyed writes a job of kind sync with a unique key, in a state.
func seedKeyed(t *testing.T, db *testdb.DB, state, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, unique_key, run_at)
VALUES ('sync', $1::text, CASE WHEN $1::text = 'pending' THEN 0 ELSE 2 END, 2,
        CASE WHEN $1::text <> 'pending' THEN now() END, $2::text, now() + interval '1 hour')
RETURNING id`, state, key).Scan(&id))
	return id
}

// TestJobsRetryReportsHeldUniqueKeys: `fila jobs retry 1 2 3` with one
// key held by a pending job used to retry none of them and print a raw
// 23505 naming neither job nor key, by ids and by --state alike.
func TestJobsRetryReportsHeldUniqueKeys(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	j1, j2, j3 := seedKeyed(t, db, "dead", "acct:1"), seedKeyed(t, db, "dead", "acct:2"), seedKeyed(t, db, "dead", "acct:3")
	holder := seedKeyed(t, db, "pending", "acct:2")
	state := func(id int64) string {
		var s string
		require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&s))
		return s
	}

	out, errOut, code := fila(t, db, "jobs", "retry", fmt.Sprint(j1), fmt.Sprint(j2), fmt.Sprint(j3))
	require.Equal(t, 1, code, "a job left alone fails the command")
	require.Equal(t, fmt.Sprintf("job %d: retried (was dead)\njob %d: retried (was dead)\n", j1, j3), out)
	require.Equal(t, fmt.Sprintf("fila jobs retry: job %d: unique key \"acct:2\" is held by pending job %d\n", j2, holder), errOut)
	require.Equal(t, "pending", state(j1))
	require.Equal(t, "dead", state(j2))
	require.Equal(t, "pending", state(j3))

	out, _, code = fila(t, db, "jobs", "retry", "--json", fmt.Sprint(j2))
	require.Equal(t, 1, code)
	var res struct {
		Changed []any `json:"changed"`
		Skipped []struct {
			ID          int64  `json:"id"`
			Reason      string `json:"reason"`
			UniqueKey   string `json:"unique_key"`
			HeldBy      int64  `json:"held_by"`
			HeldByState string `json:"held_by_state"`
		} `json:"skipped"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Empty(t, res.Changed)
	require.Len(t, res.Skipped, 1)
	require.Equal(t, j2, res.Skipped[0].ID)
	require.Equal(t, "acct:2", res.Skipped[0].UniqueKey)
	require.Equal(t, holder, res.Skipped[0].HeldBy)
	require.Equal(t, "pending", res.Skipped[0].HeldByState)

	// --state dead: the free ones move, the held one is named.
	j4 := seedKeyed(t, db, "dead", "acct:4")
	out, errOut, code = fila(t, db, "jobs", "retry", "--state", "dead")
	require.Equal(t, 1, code)
	require.Equal(t, fmt.Sprintf("retried 1 dead job: %d\n", j4), out)
	require.Equal(t, fmt.Sprintf("fila jobs retry: job %d: unique key \"acct:2\" is held by pending job %d\n", j2, holder), errOut)
	require.Equal(t, "pending", state(j4))
	out, errOut, code = fila(t, db, "jobs", "retry", "--state", "dead", "--json")
	require.Equal(t, 1, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Empty(t, res.Changed)
	require.Equal(t, holder, res.Skipped[0].HeldBy)
}

// Tags and metadata given to fila enqueue find the job (jobs list --tag,
// --meta) and are shown by jobs show, with a handler's output and the
// job's own policy.
func TestTagsMetadataAndOutputOnTheCommandLine(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	enqueue := func(args ...string) string {
		out, errOut, code := fila(t, db, append([]string{"enqueue", "--kind", "k", "--allow-unknown-kind"}, args...)...)
		require.Zero(t, code, errOut)
		return strings.TrimSpace(out)
	}
	tagged := enqueue("--tag", "billing", "--tag", "eu", "--meta", "tenant=acme")
	enqueue("--tag", "other")
	// A policy of its own (InsertOpts.Timeout), shown apart from the metadata.
	_, err := db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now(), output = '{"rows": 3}',
		policy = '{"timeout_ms": 1500}' WHERE id = $1::bigint`, tagged)
	require.NoError(t, err)

	out, errOut, code := fila(t, db, "jobs", "list", "--tag", "billing", "--json")
	require.Zero(t, code, errOut)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, tagged, fmt.Sprint(listed[0]["id"]))
	out, errOut, code = fila(t, db, "jobs", "list", "--meta", "tenant=acme")
	require.Zero(t, code, errOut)
	require.Contains(t, out, tagged)
	out, errOut, code = fila(t, db, "jobs", "list", "--meta", "tenant=zeta")
	require.Zero(t, code, errOut)
	require.NotContains(t, out, tagged)

	out, errOut, code = fila(t, db, "jobs", "show", tagged)
	require.Zero(t, code, errOut)
	require.Regexp(t, `tags\s+billing, eu`, out)
	require.Regexp(t, `metadata\s+\{"tenant": "acme"\}\n`, out)
	require.Regexp(t, `policy\s+\{"timeout_ms": 1500\}`, out)
	require.Regexp(t, `output\s+\{"rows": 3\}`, out)
	_, errOut, code = fila(t, db, "enqueue", "--kind", "k", "--allow-unknown-kind", "--meta", "novalue")
	require.NotZero(t, code)
	require.Contains(t, errOut, "KEY=VALUE")
}

// cancel and delete take --state, --kind and --queue as retry does, and
// report each job the same way; list takes the scheduled and retrying
// views of pending; show names the worker and how long a running job has
// run, and shows no lease for a cancelled job.
func TestJobsByState(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	p1 := seedState(t, db, "mail", "pending")
	p2 := seedState(t, db, "mail", "pending")
	sms := seedState(t, db, "sms", "pending")
	running := seedState(t, db, "mail", "running")
	_, err := db.Pool.Exec(ctx, `UPDATE fila_jobs SET worker = 'host/7/beef', started_at = now() - interval '90 seconds' WHERE id = $1`, running)
	require.NoError(t, err)

	out, errOut, code := fila(t, db, "jobs", "show", fmt.Sprint(running))
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^running for\s+1m3\ds$`, out)
	require.Regexp(t, `(?m)^worker\s+host/7/beef$`, out)
	require.Regexp(t, `(?m)^lease until\s+\d{4}-`, out)

	out, errOut, code = fila(t, db, "jobs", "cancel", "--state", "pending", "--kind", "mail")
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("cancelled 2 pending jobs: %d, %d\n", p1, p2), out)
	out, errOut, code = fila(t, db, "jobs", "cancel", "--state", "running", "--json")
	require.Zero(t, code, errOut)
	var res runtime.ChangeResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, []runtime.JobChange{{ID: running, From: "running"}}, res.Changed)
	out, errOut, code = fila(t, db, "jobs", "cancel", "--state", "running")
	require.Zero(t, code, errOut)
	require.Equal(t, "no running jobs to cancel\n", out)

	// A cancelled job shows no lease, and the worker of its last attempt.
	out, errOut, code = fila(t, db, "jobs", "show", fmt.Sprint(running))
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^lease until\s+-$`, out)
	require.Regexp(t, `(?m)^worker\s+host/7/beef \(its last attempt's\)$`, out)
	require.NotContains(t, out, "running for")
	out, errOut, code = fila(t, db, "jobs", "show", "--json", fmt.Sprint(running))
	require.Zero(t, code, errOut)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Nil(t, shown["lease_until"])
	require.Equal(t, "host/7/beef", shown["worker"])

	out, errOut, code = fila(t, db, "jobs", "delete", "--state", "cancelled", "--kind", "mail")
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("deleted 3 cancelled jobs: %d, %d, %d\n", p1, p2, running), out)
	out, _, _ = fila(t, db, "jobs", "list")
	require.Equal(t, []string{fmt.Sprint(sms)}, jobIDs(out), "only the sms job is left")

	// The views of pending.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, attempts, run_at, last_error) VALUES
		('mail', 0, now() + interval '1 hour', NULL), ('mail', 1, now() + interval '1 minute', 'timeout'), ('mail', 1, now() - interval '1 second', 'timeout')`)
	require.NoError(t, err)
	ids := func(args ...string) []string {
		out, errOut, code := fila(t, db, append([]string{"jobs", "list"}, args...)...)
		require.Zero(t, code, errOut)
		return jobIDs(out)
	}
	require.Len(t, ids("--state", "scheduled"), 2)
	require.Len(t, ids("--state", "retrying"), 2)
	require.Len(t, ids("--state", "pending"), 4)
	_, errOut, code = fila(t, db, "jobs", "list", "--state", "later")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `--state "later" is unknown: use held, waiting, pending, running, completed, dead, cancelled, scheduled, retrying`)
	out, errOut, code = fila(t, db, "jobs", "delete", "--state", "scheduled")
	require.Zero(t, code, errOut)
	require.Regexp(t, `^deleted 2 scheduled jobs: \d+, \d+\n$`, out)
	require.Len(t, ids("--state", "pending"), 2)
}

// jobIDs reads the ids of a `jobs list` table.
func jobIDs(out string) []string {
	var ids []string
	for _, l := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// TestJobsListOrdersAndPagesUpdateAndQueues: `jobs list` takes several
// states at once, an order and a cursor; `jobs update` changes a pending
// job and refuses a running one; `queue list` shows each queue's counts.
func TestJobsListOrdersAndPagesUpdateAndQueues(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	pending := seedState(t, db, "mail", "pending")
	dead := seedState(t, db, "mail", "dead")
	running := seedState(t, db, "mail", "running")
	seedState(t, db, "resize", "completed")

	ids := func(args ...string) ([]int64, string) {
		t.Helper()
		out, errOut, code := fila(t, db, append([]string{"jobs", "list", "--json"}, args...)...)
		require.Zero(t, code, errOut)
		var rows []struct{ ID int64 }
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		got := make([]int64, len(rows))
		for i, r := range rows {
			got[i] = r.ID
		}
		return got, out
	}
	got, _ := ids("--state", "dead,running")
	require.Equal(t, []int64{running, dead}, got)
	got, _ = ids("--state", "pending,dead", "--order", "id", "--asc")
	require.Equal(t, []int64{pending, dead}, got)

	out, errOut, code := fila(t, db, "jobs", "list", "--kind", "mail", "--asc", "--limit", "2")
	require.Zero(t, code, errOut)
	i := strings.Index(out, "--cursor ")
	require.Positive(t, i, out)
	cursor := strings.TrimSuffix(strings.TrimSpace(out[i+len("--cursor "):]), ")")
	got, _ = ids("--kind", "mail", "--asc", "--limit", "2", "--cursor", cursor)
	require.Equal(t, []int64{running}, got, "the page after the cursor")
	_, errOut, code = fila(t, db, "jobs", "list", "--kind", "mail", "--limit", "2", "--cursor", cursor)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "it continues a listing by id ascending, and this one is by id descending")
	_, errOut, code = fila(t, db, "jobs", "list", "--payload", "{nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "is not valid JSON")

	out, errOut, code = fila(t, db, "jobs", "update", fmt.Sprint(pending), "--priority", "-3", "--run-at", "+1h", "--tags", "a,b", "--max-attempts", "7")
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprintf("job %d: updated (pending, priority -3", pending))
	j, err := runtime.GetJob(context.Background(), db.Pool, pending)
	require.NoError(t, err)
	require.EqualValues(t, -3, j.Priority)
	require.Equal(t, []string{"a", "b"}, j.Tags)
	require.Equal(t, 7, j.MaxAttempts)
	require.True(t, j.RunAt.After(j.Now.Add(50*time.Minute)), "run at an hour from now")
	_, errOut, code = fila(t, db, "jobs", "update", fmt.Sprint(running), "--priority", "1")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "job is running")
	_, errOut, code = fila(t, db, "jobs", "update", fmt.Sprint(pending))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "say what to change")

	out, errOut, code = fila(t, db, "queue", "list")
	require.Zero(t, code, errOut)
	require.Regexp(t, `(?m)^QUEUE\s+PAUSED\s+RUNNABLE\s+SCHEDULED\s+RUNNING\s+WAITING\s+DEAD\s+OLDEST RUNNABLE$`, out)
	require.Regexp(t, `(?m)^default\s+no\s+0\s+1\s+1\s+0\s+1\s+-$`, out)
}

func TestJobsReleaseHeld(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	out, errOut, code := fila(t, db, "enqueue", "--kind", "mail", "--allow-unknown-kind", "--held")
	require.Zero(t, code, errOut)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err, out)
	var state string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&state))
	require.Equal(t, "held", state)

	out, errOut, code = fila(t, db, "jobs", "list", "--state", "held", "--json")
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprintf(`"id": %d`, id))

	out, errOut, code = fila(t, db, "jobs", "release", fmt.Sprint(id), "424242")
	require.Equal(t, 1, code, "a job left alone fails the command")
	require.Equal(t, fmt.Sprintf("job %d: released (was held)\n", id), out)
	require.Equal(t, "fila jobs release: job 424242 does not exist\n", errOut)
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&state))
	require.Equal(t, "pending", state)

	_, errOut, code = fila(t, db, "jobs", "release", fmt.Sprint(id))
	require.Equal(t, 1, code)
	require.Equal(t, fmt.Sprintf("fila jobs release: job %d is pending, not held: only held jobs are released\n", id), errOut)

	_, errOut, code = fila(t, db, "jobs", "release")
	require.NotZero(t, code)
	require.Contains(t, errOut, "ids")
}
