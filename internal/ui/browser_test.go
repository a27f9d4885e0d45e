package ui_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/internal/ui"
	"github.com/fila-run/fila/runtime"
)

// chromiumEnv names another browser binary than Debian's chromium.
const chromiumEnv = "FILA_CHROMIUM"

// screenshotsEnv names a directory the browser tests save screenshots of
// the main pages to (docs/ui in the repository).
const screenshotsEnv = "FILA_UI_SCREENSHOTS"

// browser starts a headless chromium of the test's own, with a fresh
// profile, and returns a tab's context; both end with the test. A machine
// without chromium is a missing prerequisite (scripts/setup.sh installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv(chromiumEnv)
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		testdb.Missing(t, "no chromium at %s (scripts/setup.sh installs Debian's chromium; %s names another): %v", path, chromiumEnv, err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser; it has no deadline of its own,
	// for a deadline on it would stop the whole browser when it passed.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx
}

// within runs browser actions with a deadline.
func within(t *testing.T, ctx context.Context, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	require.NoError(t, chromedp.Do(cctx, steps...))
}

// text reads the text of the page's element sel, trying again while the
// page is between two loads (the overview refreshes itself).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	var err error
	if !testwait.For(30*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err = chromedp.Run(cctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil
	}) {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitForText polls the text of the page's element sel until it is want:
// the page may be loading, or about to refresh itself.
func waitForText(t *testing.T, ctx context.Context, d time.Duration, sel, want string) {
	t.Helper()
	var got string
	var err error
	if !testwait.For(d, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err = chromedp.Run(cctx, chromedp.Text(chromedp.CSS(sel)))
		return err == nil && got == want
	}) {
		t.Fatalf("the page does not show %q in %s within %s (last seen %q, %v)", want, sel, d, got, err)
	}
}

// postFromPage sends an action from the page the browser shows, as a
// script of that page would, and returns the HTTP status.
func postFromPage(t *testing.T, ctx context.Context, form string) int {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	status, err := chromedp.Run(cctx, chromedp.Evaluate[int](
		fmt.Sprintf(`fetch("/actions/jobs", {method: "POST", body: new URLSearchParams(%q)}).then((r) => r.status)`, form),
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	return status
}

// screenshot saves the page as NAME.png under $FILA_UI_SCREENSHOTS, if
// set: all of it, or what the window shows.
func screenshot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(cctx, shot)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// startRuntime runs a worker on db until the test ends.
func startRuntime(t *testing.T, db *testdb.DB, queues []string, kinds ...runtime.Kind) *runtime.Runtime {
	t.Helper()
	return testrt.Start(t, runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Queues: queues, Kinds: kinds,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, SafetyPoll: 10 * time.Minute,
		Logger: zaptest.NewLogger(t)})
}

// TestBrowserRetriesDeadJob drives the dashboard in a real browser: a live
// worker's handler fails a job permanently; the dashboard shows it dead
// with its error; without the token the retry is refused; with it, a click
// on Retry (the handler now succeeding) and the page shows it completed.
func TestBrowserRetriesDeadJob(t *testing.T) {
	t.Parallel()
	tab := browser(t)
	db := newDB(t)
	var failing atomic.Bool
	failing.Store(true)
	startRuntime(t, db, nil, runtime.Kind{Name: "charge", Handler: func(ctx context.Context, job *runtime.Job) error {
		if failing.Load() {
			return runtime.Permanent(errors.New("card declined: insufficient funds <script>alert(1)</script>"))
		}
		return nil
	}})
	ctx := context.Background()
	id, err := runtime.Insert(ctx, db.Pool, "charge", map[string]any{"order": 4217, "cents": 1999}, nil)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the job dies", func() bool { return jobState(t, db, id) == "dead" })
	row := fmt.Sprintf(`tr[data-job="%d"]`, id)
	retryForm := fmt.Sprintf("op=retry&id=%d", id)

	// Read-only: the dead job and its error are there, the page says
	// read-only, and a retry sent from the page is refused.
	readOnly := serve(t, db, "")
	within(t, tab, 30*time.Second, chromedp.Navigate(readOnly.URL+"/dead"), chromedp.WaitVisible(chromedp.CSS(row)))
	require.Contains(t, text(t, tab, row), "card declined: insufficient funds <script>alert(1)</script>",
		"the error is shown as text, markup and all")
	require.Equal(t, "Read-only", text(t, tab, "#mode"))
	require.Contains(t, text(t, tab, "body"), "Read-only: this dashboard was started without an admin token")
	require.Equal(t, 403, postFromPage(t, tab, retryForm))
	require.Equal(t, "dead", jobState(t, db, id))

	// With tokens and not logged in: the job's page is the login form.
	const token, readToken = "browser-test-token", "browser-read-token"
	admin := serveWith(t, db, ui.Options{AdminToken: token, ReadToken: readToken})
	within(t, tab, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", admin.URL, id)), chromedp.WaitVisible(chromedp.ID("token")))
	require.NotContains(t, text(t, tab, "body"), "card declined", "nothing of the job before logging in")
	require.Equal(t, 403, postFromPage(t, tab, retryForm))

	// The read token shows the job, and acts on nothing.
	within(t, tab, 30*time.Second,
		chromedp.SendKeys(chromedp.ID("token"), readToken),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("state")),
	)
	require.Equal(t, "dead", text(t, tab, "#state"))
	require.Contains(t, text(t, tab, "#errors"), "card declined")
	require.Equal(t, "Viewing", text(t, tab, "#mode"))
	require.Equal(t, 403, postFromPage(t, tab, retryForm))
	require.Equal(t, "dead", jobState(t, db, id))

	// Log in as the admin, switch the handler to succeed, click Retry.
	within(t, tab, 30*time.Second,
		chromedp.Click(chromedp.CSS(`a[href^="/login"]`)),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("retry")),
	)
	require.Equal(t, "Admin", text(t, tab, "#mode"))
	failing.Store(false)
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.ID("retry")))
	waitForText(t, tab, 30*time.Second, "#flash", fmt.Sprintf("retried job %d", id))

	// The page refreshes itself while the job is pending or running.
	waitForText(t, tab, 60*time.Second, "#state", "completed")
	require.Equal(t, "completed", jobState(t, db, id))
	require.True(t, strings.Contains(text(t, tab, "#errors"), "card declined"), "the failed attempt stays in the history")
}
