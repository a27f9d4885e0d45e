package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
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
		{[]string{"jobs", "list", "--state", "failed"}, 1, `--state "failed" is unknown: use pending, running, completed, dead, cancelled`},
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

	out, errOut, code := fila(t, db, "jobs", "retry", fmt.Sprint(dead), fmt.Sprint(running), fmt.Sprint(completed))
	require.Equal(t, 1, code, "a job left alone fails the command")
	require.Equal(t, fmt.Sprintf("retried 1 job: %d\n", dead), out)
	require.Equal(t, fmt.Sprintf("fila jobs retry: job %d is running: cancel it first, or let it finish; job %d is completed: a completed job is not run again (enqueue a new one)\n", running, completed), errOut)
	require.Equal(t, "pending", state(dead))
	require.Equal(t, "running", state(running))

	out, errOut, code = fila(t, db, "jobs", "cancel", fmt.Sprint(running), fmt.Sprint(pending))
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("cancelled 2 jobs: %d, %d\njob %d was running: its worker stops it at its next heartbeat\n", running, pending, running), out)
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
	require.Equal(t, fmt.Sprintf("deleted 1 job: %d\n", completed), out)
	require.Equal(t, fmt.Sprintf("fila jobs delete: job %d is running: cancel it first\n", running2), errOut)
	require.Equal(t, "gone", state(completed))
	require.Equal(t, "running", state(running2))

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"jobs", "retry"}, exitUsage, "give job ids, or --state dead|cancelled"},
		{[]string{"jobs", "retry", "1", "--state", "dead"}, exitUsage, "give job ids or --state, not both"},
		{[]string{"jobs", "retry", "--kind", "mail"}, exitUsage, "add --state"},
		{[]string{"jobs", "retry", "--state", "running"}, 1, `--state "running": only dead or cancelled jobs can be retried`},
		{[]string{"jobs", "retry", "0"}, 1, `"0" is not a job id`},
		{[]string{"jobs", "cancel"}, exitUsage, "give the ids of the jobs to cancel"},
		{[]string{"jobs", "delete", "-5"}, exitUsage, "flag provided but not defined: -5"},
	} {
		out, errOut, code := fila(t, db, c.args...)
		require.Equal(t, c.code, code, "%v", c.args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
	}
}
