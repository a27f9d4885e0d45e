package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/internal/ui"
	"github.com/fila-run/fila/runtime"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(
			// pgxpool's background health check of the shared admin pool in testdb.
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shared with the other packages' tests (internal/testrt).
var (
	newDB   = testrt.Migrated
	waitFor = testrt.WaitFor
)

// serve starts the dashboard on db with the given admin token ("" for
// read-only), its pages readable without logging in (PublicRead).
func serve(t *testing.T, db *testdb.DB, token string) *httptest.Server {
	t.Helper()
	return serveWith(t, db, ui.Options{AdminToken: token, PublicRead: true})
}

// serveWith starts the dashboard on db with opts.
func serveWith(t *testing.T, db *testdb.DB, opts ui.Options) *httptest.Server {
	t.Helper()
	h, err := ui.New(db.Pool, opts, zaptest.NewLogger(t))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// client is a browser-like HTTP client: it keeps cookies and does not
// follow redirects, so a test sees where an action sends it.
func client(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// post sends a form the way a browser on the dashboard's own page does.
func post(t *testing.T, c *http.Client, srv *httptest.Server, path string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", srv.URL)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// deadJob writes a job that died with the given error, as a worker would
// have left it.
func deadJob(t *testing.T, db *testdb.DB, kind string, payload any, lastErr string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := runtime.Insert(ctx, db.Pool, kind, payload, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'dead', attempts = 1, started_at = now() - interval '2 seconds',
		finished_at = now(), last_error = $2, errors = fila_append_error(errors, 1, $2) WHERE id = $1`, id, lastErr)
	require.NoError(t, err)
	return id
}

func jobState(t *testing.T, db *testdb.DB, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT state FROM fila_jobs WHERE id = $1`, id).Scan(&state))
	return state
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs c in with token and returns the CSRF token its pages carry.
func login(t *testing.T, c *http.Client, srv *httptest.Server, token string) string {
	t.Helper()
	resp, _ := post(t, c, srv, "/login", url.Values{"token": {token}, "back": {"/jobs"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/jobs", resp.Header.Get("Location"))
	_, body := get(t, c, srv.URL+"/jobs")
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "a logged-in page carries the CSRF token:\n%s", body)
	return m[1]
}
