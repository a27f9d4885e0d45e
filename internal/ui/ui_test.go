package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func TestReadOnlyRefusesEveryAction(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	id := deadJob(t, db, "charge", map[string]int{"cents": 100}, "card declined")
	srv := serve(t, db, "")
	c := client(t)

	code, body := get(t, c, srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Read-only: this dashboard was started without an admin token")
	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="retry"`, "a read-only page offers no action")

	for _, a := range []struct {
		path string
		form url.Values
	}{
		{"/actions/jobs", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(id, 10)}}},
		{"/actions/jobs", url.Values{"op": {"delete"}, "id": {strconv.FormatInt(id, 10)}}},
		{"/actions/retry-dead", url.Values{"kind": {"charge"}}},
		{"/actions/delete-dead", url.Values{"kind": {"charge"}}},
		{"/actions/queues", url.Values{"op": {"pause"}, "queue": {"default"}}},
		{"/login", url.Values{"token": {""}}},
	} {
		resp, body := post(t, c, srv, a.path, a.form, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, a.path)
		require.Contains(t, body, "read-only", a.path)
		// Not even a token in a header helps: there is none to match.
		resp, _ = post(t, c, srv, a.path, a.form, map[string]string{"Authorization": "Bearer anything"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, a.path)
	}
	require.Equal(t, "dead", jobState(t, db, id))
	paused, err := runtime.PausedQueues(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Empty(t, paused)

	// Actions are POSTs: a GET of an action route changes nothing.
	code, _ = get(t, c, srv.URL+"/actions/jobs?op=retry&id="+strconv.FormatInt(id, 10))
	require.Equal(t, http.StatusMethodNotAllowed, code)
}

func TestActionsNeedSessionAndCSRF(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const token = "s3cret-token-0001"
	ids := []int64{
		deadJob(t, db, "charge", nil, "card declined"),
		deadJob(t, db, "charge", nil, "card declined"),
		deadJob(t, db, "mail", nil, "smtp 550"),
	}
	srv := serve(t, db, token)
	form := func(op string, ids ...int64) url.Values {
		v := url.Values{"op": {op}, "back": {"/dead"}}
		for _, id := range ids {
			v.Add("id", strconv.FormatInt(id, 10))
		}
		return v
	}

	// A visitor who has not logged in sees the pages but cannot act.
	visitor := client(t)
	code, body := get(t, visitor, srv.URL+"/dead")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Log in to act")
	require.NotContains(t, body, `name="csrf" value="`+"x")
	resp, body := post(t, visitor, srv, "/actions/jobs", form("retry", ids[0]), nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "log in with the admin token")

	// A wrong token logs nobody in.
	resp, body = post(t, visitor, srv, "/login", url.Values{"token": {"guess"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "that is not the admin token")

	admin := client(t)
	csrf := login(t, admin, srv, token)

	_, body = get(t, admin, srv.URL+"/dead?kind=mail")
	require.Contains(t, body, `id="retry-kind"`, "an admin may retry every dead job of a kind")
	_, body = get(t, visitor, srv.URL+"/dead?kind=mail")
	require.NotContains(t, body, `id="retry-kind"`)

	// A logged-in session without its CSRF token, or with another
	// session's, is refused.
	resp, body = post(t, admin, srv, "/actions/jobs", form("retry", ids[0]), nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "CSRF token")
	other := client(t)
	otherCSRF := login(t, other, srv, token)
	require.NotEqual(t, csrf, otherCSRF)
	f := form("retry", ids[0])
	f.Set("csrf", otherCSRF)
	resp, _ = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// A cross-site request is refused even with the session and its token:
	// the browser says where it comes from.
	f.Set("csrf", csrf)
	resp, body = post(t, admin, srv, "/actions/jobs", f, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "cross-origin")
	resp, _ = post(t, admin, srv, "/actions/jobs", f, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "an Origin of another host is refused where Sec-Fetch-Site is missing")
	require.Equal(t, "dead", jobState(t, db, ids[0]))

	// The session, its CSRF token and the same origin: the bulk retry
	// retries both jobs and says so on the page it returns to.
	f = form("retry", ids[0], ids[1])
	f.Set("csrf", csrf)
	resp, _ = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/dead", resp.Header.Get("Location"))
	require.Equal(t, "pending", jobState(t, db, ids[0]))
	require.Equal(t, "pending", jobState(t, db, ids[1]))
	_, body = get(t, admin, srv.URL+"/dead")
	require.Contains(t, body, "retried 2 jobs")
	_, body = get(t, admin, srv.URL+"/dead")
	require.NotContains(t, body, "retried 2 jobs", "the message is shown once")

	// A skipped job is reported with the runtime's reason.
	f = form("retry", ids[0])
	f.Set("csrf", csrf)
	post(t, admin, srv, "/actions/jobs", f, nil)
	_, body = get(t, admin, srv.URL+"/dead")
	require.Contains(t, body, fmt.Sprintf("job %d is already pending", ids[0]))

	// A return address elsewhere is not followed.
	f = form("cancel", ids[0])
	f.Set("csrf", csrf)
	f.Set("back", "//evil.example/x")
	resp, _ = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, "/", resp.Header.Get("Location"))
	require.Equal(t, "cancelled", jobState(t, db, ids[0]))

	// Bad input is one clear line.
	f = form("explode", ids[2])
	f.Set("csrf", csrf)
	resp, body = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `action &#34;explode&#34; is unknown`)
	f = url.Values{"op": {"delete"}, "id": {"12abc"}, "csrf": {csrf}}
	resp, body = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "is not a positive whole number")

	// Logging out ends the session.
	resp, _ = post(t, admin, srv, "/logout", url.Values{}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	f = form("delete", ids[2])
	f.Set("csrf", csrf)
	resp, _ = post(t, admin, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "dead", jobState(t, db, ids[2]))
}

func TestTokenInHeaderForScripts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const token = "header-token-00001"
	id := deadJob(t, db, "charge", nil, "card declined")
	mail := deadJob(t, db, "mail", nil, "smtp 550")
	srv := serve(t, db, token)
	c := client(t)
	// A script sends neither Sec-Fetch-Site nor Origin, and no CSRF token:
	// the token in its header is enough.
	script := map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "", "Origin": ""}

	resp, body := post(t, c, srv, "/actions/jobs", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(id, 10), "999999"}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var res runtime.ChangeResult
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Equal(t, []int64{id}, res.IDs())
	require.Len(t, res.Skipped, 1)
	require.Equal(t, "job 999999 does not exist", res.Skipped[0].Reason)
	require.Equal(t, "pending", jobState(t, db, id))

	resp, body = post(t, c, srv, "/actions/retry-dead", url.Values{"kind": {"mail"}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "pending", jobState(t, db, mail))

	resp, body = post(t, c, srv, "/actions/queues", url.Values{"op": {"pause"}, "queue": {"mail"}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	paused, err := runtime.PausedQueues(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"mail"}, paused)
	_, page := get(t, c, srv.URL+"/")
	require.Regexp(t, `data-queue="mail">[\s\S]*?paused`, page)
	resp, _ = post(t, c, srv, "/actions/queues", url.Values{"op": {"resume"}, "queue": {"mail"}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	paused, err = runtime.PausedQueues(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Empty(t, paused)

	resp, body = post(t, c, srv, "/actions/queues", url.Values{"op": {"pause"}, "queue": {"no spaces"}}, script)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "queue")

	wrong := map[string]string{"Authorization": "Bearer " + token + "x", "Sec-Fetch-Site": "", "Origin": ""}
	resp, body = post(t, c, srv, "/actions/jobs", url.Values{"op": {"cancel"}, "id": {strconv.FormatInt(id, 10)}}, wrong)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "does not carry the admin token")
	require.Equal(t, "pending", jobState(t, db, id))
}

func TestPagesShowJobsAsText(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	evil := `<script>alert("payload")</script><img src=x onerror=alert(1)>`
	id := deadJob(t, db, "render", map[string]string{"html": evil}, `<b>bold</b> error & "quotes"`)
	_, err := runtime.Insert(ctx, db.Pool, "mail", map[string]int{"n": 1}, &runtime.InsertOpts{Queue: "mail"})
	require.NoError(t, err)
	srv := serve(t, db, "")
	c := client(t)

	code, body := get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", id))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.NotContains(t, body, "<b>bold</b>")
	require.Contains(t, body, `&lt;b&gt;bold&lt;/b&gt; error &amp; &#34;quotes&#34;`)
	require.Regexp(t, `<pre class="payload" id="payload">\{\n  &#34;html&#34;: &#34;&lt;script&gt;alert`, body,
		"the payload is indented JSON, shown as text")
	require.Equal(t, "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
		mustHead(t, srv.URL+"/").Get("Content-Security-Policy"))

	_, body = get(t, c, srv.URL+"/dead")
	require.Contains(t, body, fmt.Sprintf(`href="/jobs/%d"`, id))
	require.Contains(t, body, `&lt;b&gt;bold&lt;/b&gt;`)
	require.NotContains(t, body, "<b>bold</b>")

	_, body = get(t, c, srv.URL+"/")
	require.Contains(t, body, `data-queue="mail"`)
	require.Contains(t, body, `<a href="/dead?kind=render">render</a>`)
	require.Contains(t, body, `<svg class="chart"`)
}

func mustHead(t *testing.T, u string) http.Header {
	resp, err := http.Head(u)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.Header
}

func TestJobSearch(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mail []int64
	for i := range 60 {
		id, err := runtime.Insert(ctx, db.Pool, "mail", map[string]int{"n": i}, &runtime.InsertOpts{Queue: "mail", RunAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		mail = append(mail, id)
	}
	dead := deadJob(t, db, "charge", nil, "card declined")
	srv := serve(t, db, "")
	c := client(t)

	// Newest first, a page at a time, the next page before the last id.
	code, body := get(t, c, srv.URL+"/jobs?kind=mail&state=pending")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 50, strings.Count(body, `data-state="pending"`))
	require.Contains(t, body, fmt.Sprintf(`data-job="%d"`, mail[59]))
	require.NotContains(t, body, fmt.Sprintf(`data-job="%d"`, mail[9]))
	require.Contains(t, body, fmt.Sprintf(`href="/jobs?before=%d&amp;kind=mail&amp;state=pending"`, mail[10]))
	_, body = get(t, c, srv.URL+fmt.Sprintf("/jobs?kind=mail&state=pending&before=%d", mail[10]))
	require.Equal(t, 10, strings.Count(body, `data-state="pending"`))
	require.NotContains(t, body, `id="older"`)

	_, body = get(t, c, srv.URL+"/jobs?state=dead")
	require.Equal(t, 1, strings.Count(body, `data-job=`))
	require.Contains(t, body, fmt.Sprintf(`data-job="%d"`, dead))

	_, body = get(t, c, srv.URL+"/jobs?queue=mail")
	require.Contains(t, body, "No index leads with kind or queue alone")

	resp, err := c.Get(srv.URL + fmt.Sprintf("/jobs?id=%d", dead))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, fmt.Sprintf("/jobs/%d", dead), resp.Header.Get("Location"))

	code, body = get(t, c, srv.URL+"/jobs?state=finished")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `state &#34;finished&#34; is unknown`)
	code, body = get(t, c, srv.URL+"/jobs?id=abc")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "is not a positive whole number")
	code, body = get(t, c, srv.URL+"/jobs/99999999")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "job 99999999 does not exist")
}

// TestRetryReportsHeldUniqueKeys: the dashboard's retry and retry-all go
// through runtime.Retry and RetryWhere, so a job whose unique key another
// job holds is named with its reason while the others move.
func TestRetryReportsHeldUniqueKeys(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const token = "held-keys-admin-token"
	keyed := func(state, key string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `
INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, unique_key, run_at)
VALUES ('sync', $1::text, CASE WHEN $1::text = 'pending' THEN 0 ELSE 2 END, 2,
        CASE WHEN $1::text <> 'pending' THEN now() END, $2::text, now() + interval '1 hour')
RETURNING id`, state, key).Scan(&id))
		return id
	}
	free, held := keyed("dead", "acct:1"), keyed("dead", "acct:2")
	holder := keyed("pending", "acct:2")
	srv := serve(t, db, token)
	c := client(t)
	csrf := login(t, c, srv, token)

	form := url.Values{"op": {"retry"}, "id": {strconv.FormatInt(free, 10), strconv.FormatInt(held, 10)}, "csrf": {csrf}, "back": {"/dead"}}
	resp, _ := post(t, c, srv, "/actions/jobs", form, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body := get(t, c, srv.URL+"/dead")
	require.Contains(t, body, fmt.Sprintf("retried job %d; job %d: unique key &#34;acct:2&#34; is held by pending job %d", free, held, holder))
	require.Equal(t, "pending", jobState(t, db, free))
	require.Equal(t, "dead", jobState(t, db, held))

	other := keyed("dead", "acct:3")
	resp, _ = post(t, c, srv, "/actions/retry-dead", url.Values{"kind": {"sync"}, "csrf": {csrf}, "back": {"/dead"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = get(t, c, srv.URL+"/dead")
	require.Contains(t, body, fmt.Sprintf("retried 1 dead jobs of kind sync; job %d: unique key &#34;acct:2&#34; is held by pending job %d", held, holder))
	require.Equal(t, "pending", jobState(t, db, other))

	// A script gets every refused job as data.
	script := map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "", "Origin": ""}
	resp, body = post(t, c, srv, "/actions/retry-dead", url.Values{"kind": {"sync"}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var res runtime.ChangeResult
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Empty(t, res.Changed)
	require.Len(t, res.Skipped, 1)
	require.Equal(t, holder, res.Skipped[0].HeldBy)
}

// A held job is listed under its state and shown held on its page, and
// the release action lets it go.
func TestReleaseHeldJob(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const token = "header-token-00002"
	id, err := runtime.Insert(context.Background(), db.Pool, "charge", nil, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)
	srv := serve(t, db, token)
	c := client(t)
	script := map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "", "Origin": ""}

	_, page := get(t, c, srv.URL+"/jobs?state=held")
	require.Contains(t, page, fmt.Sprintf("/jobs/%d", id))
	_, page = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", id))
	require.Contains(t, page, `id="state">held</span>`)

	resp, body := post(t, c, srv, "/actions/jobs", url.Values{"op": {"release"}, "id": {strconv.FormatInt(id, 10)}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var res runtime.ChangeResult
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Equal(t, []int64{id}, res.IDs())
	require.Equal(t, "pending", jobState(t, db, id))

	resp, body = post(t, c, srv, "/actions/jobs", url.Values{"op": {"release"}, "id": {strconv.FormatInt(id, 10)}}, script)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Empty(t, res.Changed)
	require.Contains(t, res.Skipped[0].Reason, "is pending, not held")
}
