package ui_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// The Scheduled, Retrying and Running views: each lists its part of the
// jobs, a running job with how long it has run and the worker that owns
// it; a cancelled job's page shows no lease.
func TestScheduledRetryingAndRunningViews(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	seed := func(sql string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, sql).Scan(&id))
		return id
	}
	due := seed(`INSERT INTO fila_jobs (kind) VALUES ('mail') RETURNING id`)
	ahead := seed(`INSERT INTO fila_jobs (kind, run_at) VALUES ('mail', now() + interval '1 hour') RETURNING id`)
	backoff := seed(`INSERT INTO fila_jobs (kind, attempts, run_at, last_error) VALUES ('mail', 1, now() + interval '1 minute', 'timeout') RETURNING id`)
	dueRetry := seed(`INSERT INTO fila_jobs (kind, attempts, last_error) VALUES ('mail', 2, 'timeout') RETURNING id`)
	running := seed(`INSERT INTO fila_jobs (kind, state, attempts, started_at, lease_until, worker)
		VALUES ('render', 'running', 1, now() - interval '75 seconds', now() + interval '30 seconds', 'host/9/cafe') RETURNING id`)
	cancelled := seed(`INSERT INTO fila_jobs (kind, state, attempts, started_at, lease_until, finished_at, worker)
		VALUES ('render', 'cancelled', 1, now() - interval '5 seconds', now() + interval '25 seconds', now(), 'host/9/cafe') RETURNING id`)
	srv := serve(t, db, "")
	c := client(t)
	listed := func(body string) []string {
		var ids []string
		for _, m := range regexp.MustCompile(`data-job="(\d+)"`).FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	ids := func(ids ...int64) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = fmt.Sprint(id)
		}
		return out
	}

	code, body := get(t, c, srv.URL+"/jobs?state=scheduled")
	require.Equal(t, http.StatusOK, code, "state=scheduled is a view, not a bad request")
	require.Equal(t, ids(backoff, ahead), listed(body))
	require.Contains(t, body, "<h1>Scheduled jobs: pending, due later</h1>")
	require.Contains(t, body, `<a href="/jobs?state=scheduled" class="here">Scheduled</a>`, "the navigation marks the view")
	_, body = get(t, c, srv.URL+"/jobs?state=retrying")
	require.Equal(t, ids(dueRetry, backoff), listed(body))
	require.Contains(t, body, `<a href="/jobs?state=retrying" class="here">Retrying</a>`)
	_, body = get(t, c, srv.URL+"/jobs?state=pending")
	require.Equal(t, ids(dueRetry, backoff, ahead, due), listed(body))

	_, body = get(t, c, srv.URL+"/jobs?state=running")
	require.Equal(t, ids(running), listed(body))
	require.Regexp(t, `<td class="num" data-elapsed>1m 1\ds</td>\s*<td data-worker><code>host/9/cafe</code></td>`, body)
	require.Contains(t, body, `<body data-refresh="5">`, "the running view refreshes itself")

	_, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", running))
	require.Regexp(t, `<dt>running for</dt><dd id="elapsed">1m 1\ds</dd>`, body)
	require.Contains(t, body, "<dt>lease until</dt>")
	require.Contains(t, body, `<dd id="worker"><code>host/9/cafe</code></dd>`)
	_, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", cancelled))
	require.NotContains(t, body, "lease until", "a cancelled job shows no lease")
	require.NotContains(t, body, "running for")
	require.Contains(t, body, `<dd id="worker"><code>host/9/cafe</code> <span class="muted">(its last attempt's)</span></dd>`)
}

// A paused queue's job listing says so, with a Resume button for an
// admin; a listing of a queue that runs has no banner.
func TestPausedQueueListingHasABanner(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const token = "paused-banner-token"
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind) VALUES ('reports', 'render'), ('mail', 'send');
		INSERT INTO fila_queues (queue, paused, updated_at) VALUES ('reports', true, now() - interval '90 minutes')`)
	require.NoError(t, err)
	srv := serve(t, db, token)
	visitor := client(t)
	_, body := get(t, visitor, srv.URL+"/jobs?queue=reports&state=pending")
	page := html.UnescapeString(body)
	require.Regexp(t, `<div class="banner paused" id="paused-banner">Queue <strong>reports</strong> is paused \(for 1h 30m\): no worker claims its jobs; they wait, pending, until it is resumed.`, page)
	require.NotContains(t, page, `id="resume"`, "only an admin may resume")
	_, body = get(t, visitor, srv.URL+"/jobs?queue=mail&state=pending")
	require.NotContains(t, body, "paused-banner")

	admin := client(t)
	csrf := login(t, admin, srv, token)
	_, body = get(t, admin, srv.URL+"/jobs?queue=reports")
	require.Contains(t, body, `id="resume"`)
	resp, _ := post(t, admin, srv, "/actions/queues", url.Values{"op": {"resume"}, "queue": {"reports"}, "csrf": {csrf},
		"back": {"/jobs?queue=reports"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = get(t, admin, srv.URL+"/jobs?queue=reports")
	require.NotContains(t, body, "paused-banner")
	require.Contains(t, body, "resumed queue reports")
}

// Dead jobs are deleted by filter: every one of a kind, then every one.
func TestDeleteDeadJobsByFilter(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const token = "delete-dead-token-1"
	charge := []int64{deadJob(t, db, "charge", nil, "declined"), deadJob(t, db, "charge", nil, "declined")}
	mail := deadJob(t, db, "mail", nil, "smtp 550")
	srv := serve(t, db, token)
	admin := client(t)
	csrf := login(t, admin, srv, token)

	_, body := get(t, admin, srv.URL+"/dead?kind=charge")
	require.Contains(t, body, `<button id="delete-kind" data-confirm="Delete every dead job of kind charge? This cannot be undone.">Delete every dead charge job</button>`)
	_, body = get(t, client(t), srv.URL+"/dead?kind=charge")
	require.NotContains(t, body, `id="delete-kind"`, "not for a visitor")

	resp, _ := post(t, admin, srv, "/actions/delete-dead", url.Values{"kind": {"charge"}, "csrf": {csrf}, "back": {"/dead?kind=charge"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/dead", resp.Header.Get("Location"), "the kind's page is empty now")
	_, body = get(t, admin, srv.URL+"/dead")
	require.Contains(t, body, "deleted 2 dead jobs of kind charge")
	for _, id := range charge {
		require.NotContains(t, body, fmt.Sprintf(`data-job="%d"`, id))
	}
	require.Contains(t, body, fmt.Sprintf(`data-job="%d"`, mail))
	require.Contains(t, body, `Delete every dead job</button>`)

	// A script, with the token, gets the result as JSON.
	resp, body = post(t, client(t), srv, "/actions/delete-dead", url.Values{}, map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, fmt.Sprintf(`{"changed":[{"id":%d,"from":"dead"}],"skipped":[]}`, mail), strings.TrimSpace(body))
	require.Equal(t, "gone", stateOrGone(t, db, mail))
}

// stateOrGone is a job's state, or "gone" when no job has the id.
func stateOrGone(t *testing.T, db *testdb.DB, id int64) string {
	t.Helper()
	var state string
	err := db.Pool.QueryRow(context.Background(), `SELECT state FROM fila_jobs WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "gone"
	}
	require.NoError(t, err)
	return state
}
