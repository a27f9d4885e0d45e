package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/ui"
	"github.com/fila-run/fila/runtime"
)

// TestUnauthenticatedReadsAndGuessesAreRefused: with an admin token set,
// job pages, payloads included, were readable without logging in; 2 000
// wrong logins were all answered at full speed; a one-character token was
// accepted. Reading now needs a session or a token (unless PublicRead),
// wrong tokens are throttled per address, and short tokens are refused.
func TestUnauthenticatedReadsAndGuessesAreRefused(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	id, err := runtime.Insert(ctx, db.Pool, "charge", map[string]string{"card": "4111-secret-payload"}, nil)
	require.NoError(t, err)
	for _, short := range []string{"x", "fifteen-chars!!"} {
		_, err := ui.New(db.Pool, ui.Options{AdminToken: short}, zaptest.NewLogger(t))
		require.ErrorContains(t, err, fmt.Sprintf("AdminToken is %d %s long: at least 16 are needed", len(short), map[bool]string{true: "character", false: "characters"}[len(short) == 1]))
	}
	const token = "an-admin-token-of-32-characters!"
	srv := serveWith(t, db, ui.Options{AdminToken: token})
	c := client(t)

	for _, page := range []string{"/", "/jobs", "/dead", "/workflows", "/workflows/1", fmt.Sprintf("/jobs/%d", id), fmt.Sprintf("/jobs/%d/payload", id)} {
		resp, err := c.Get(srv.URL + page)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, page)
		require.Equal(t, "/login?back="+url.QueryEscape(page), resp.Header.Get("Location"), page)
		require.NotContains(t, body, "4111-secret-payload", page)
	}
	code, body := get(t, c, srv.URL+"/login")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="token"`)
	code, _ = get(t, c, srv.URL+"/static/style.css")
	require.Equal(t, http.StatusOK, code)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/jobs/%d", id), nil)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a script is told, not redirected")
	require.Contains(t, readAll(t, resp), "log in with the read or admin token")

	// 2 000 wrong logins: a few are checked, the rest refused unchecked.
	counts := map[int]int{}
	begin := time.Now()
	for i := range 2000 {
		resp, _ := post(t, c, srv, "/login", url.Values{"token": {fmt.Sprintf("guess-%032d", i)}}, nil)
		counts[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.Positive(t, secs)
		}
	}
	t.Logf("2000 wrong logins in %s: %v", time.Since(begin).Round(time.Millisecond), counts)
	require.LessOrEqual(t, counts[http.StatusForbidden], 12, "checked: the free five, then one per backoff")
	require.GreaterOrEqual(t, counts[http.StatusTooManyRequests], 1988)
	// While refused, even the right token is not let in: no guess is
	// answered.
	resp, body = post(t, c, srv, "/login", url.Values{"token": {token}}, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Contains(t, body, "too many wrong tokens from your address")
	// Guesses in a header count the same, and are refused the same.
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp.Body.Close()
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// TestReadToken: the read token shows every page, payloads included, and
// acts on nothing; the admin token still does both.
func TestReadToken(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const admin, reader = "the-admin-token-for-tests", "the-read-token-for-tests"
	id := deadJob(t, db, "charge", map[string]string{"card": "4111-secret-payload"}, "declined")
	_, err := ui.New(db.Pool, ui.Options{AdminToken: admin, ReadToken: "short"}, zaptest.NewLogger(t))
	require.ErrorContains(t, err, "ReadToken is 5 characters long: at least 16 are needed")
	_, err = ui.New(db.Pool, ui.Options{AdminToken: admin, ReadToken: admin}, zaptest.NewLogger(t))
	require.ErrorContains(t, err, "ReadToken is the admin token")
	srv := serveWith(t, db, ui.Options{AdminToken: admin, ReadToken: reader})
	jobPage := fmt.Sprintf("/jobs/%d", id)

	// A script with the read token reads, pages and payloads alike.
	readHeader := map[string]string{"Authorization": "Bearer " + reader, "Sec-Fetch-Site": "", "Origin": ""}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/jobs/%d/payload", id), nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, readAll(t, resp), "4111-secret-payload")
	resp, body := post(t, client(t), srv, "/actions/jobs", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(id, 10)}}, readHeader)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "does not carry the admin token")
	require.Equal(t, "dead", jobState(t, db, id))

	// A browser logs in with it: it reads, and cannot act even with a form
	// it made up.
	c := client(t)
	resp, _ = post(t, c, srv, "/login", url.Values{"token": {reader}, "back": {jobPage}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, jobPage, resp.Header.Get("Location"))
	code, body := get(t, c, srv.URL+jobPage)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "4111-secret-payload")
	require.Contains(t, body, `id="mode">Viewing`)
	require.Contains(t, body, "Log in to act")
	require.NotContains(t, body, `id="retry"`)
	require.NotContains(t, body, `name="csrf"`, "a reader's pages carry no CSRF token")
	resp, body = post(t, c, srv, "/actions/jobs", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(id, 10)}, "csrf": {"x"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "the read token lets you read, not act")
	require.Equal(t, "dead", jobState(t, db, id))

	// Logging in with the admin token from there makes the session an
	// admin's.
	csrf := login(t, c, srv, admin)
	f := url.Values{"op": {"retry"}, "id": {strconv.FormatInt(id, 10)}, "csrf": {csrf}, "back": {jobPage}}
	resp, _ = post(t, c, srv, "/actions/jobs", f, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "pending", jobState(t, db, id))

	// PublicRead opens the pages, and leaves actions to the admin token.
	open := serveWith(t, db, ui.Options{AdminToken: admin, PublicRead: true})
	code, body = get(t, client(t), open.URL+jobPage)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "4111-secret-payload")
}
