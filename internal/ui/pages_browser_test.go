package ui_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// TestBrowserPagesOfABusyQueue opens every page on a database with work
// in every state and a live worker, checks what a person would look at,
// selects many jobs with the page's script and retries them at once, and
// saves the screenshots of docs/ui when FILA_UI_SCREENSHOTS is set.
func TestBrowserPagesOfABusyQueue(t *testing.T) {
	t.Parallel()
	tab := browser(t)
	db := newDB(t)
	ctx := context.Background()

	release := make(chan struct{})
	startRuntime(t, db, []string{"default", "mail", "reports", "webhooks"},
		runtime.Kind{Name: "send-welcome", Handler: func(context.Context, *runtime.Job) error { return nil }},
		runtime.Kind{Name: "charge", Handler: func(_ context.Context, job *runtime.Job) error {
			var p struct{ Card string }
			if err := job.Decode(&p); err != nil {
				return err
			}
			if p.Card == "expired" {
				return runtime.Permanent(errors.New("card ending 4242 expired in 2025-11: ask the customer for another"))
			}
			return fmt.Errorf("payment gateway timeout after 10s (attempt %d)", job.Attempt)
		}},
		runtime.Kind{Name: "render-report", Handler: func(ctx context.Context, _ *runtime.Job) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}},
	)
	t.Cleanup(func() { close(release) }) // before the runtime stops: cleanups run last first

	require.NoError(t, runtime.PauseQueue(ctx, db.Pool, "reports"))
	var jobs []runtime.InsertParams
	for i := range 40 {
		jobs = append(jobs, runtime.InsertParams{Kind: "send-welcome", Payload: map[string]any{"email": fmt.Sprintf("user%d@example.com", i)},
			InsertOpts: runtime.InsertOpts{Queue: "mail"}})
	}
	for i := range 12 {
		jobs = append(jobs, runtime.InsertParams{Kind: "send-welcome", Payload: map[string]any{"email": fmt.Sprintf("later%d@example.com", i)},
			InsertOpts: runtime.InsertOpts{Queue: "mail", RunAt: time.Now().Add(time.Duration(i+1) * 7 * time.Minute)}})
	}
	for i := range 3 {
		jobs = append(jobs, runtime.InsertParams{Kind: "charge", Payload: map[string]any{"order": 4200 + i, "cents": 1999, "card": "timeout"},
			InsertOpts: runtime.InsertOpts{MaxAttempts: 3}})
	}
	for i := range 2 {
		jobs = append(jobs, runtime.InsertParams{Kind: "charge", Payload: map[string]any{"order": 4300 + i, "cents": 4500, "card": "expired"}})
	}
	for i := range 2 {
		jobs = append(jobs, runtime.InsertParams{Kind: "render-report", Payload: map[string]any{"report": "monthly", "month": i + 1},
			InsertOpts: runtime.InsertOpts{Queue: "webhooks"}})
	}
	_, err := runtime.InsertMany(ctx, db.Pool, jobs)
	require.NoError(t, err)
	// A charge whose first attempt failed, due again in an hour: both
	// scheduled and retrying.
	var retrying int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, attempts, max_attempts, run_at, last_error, payload)
		VALUES ('charge', 1, 3, now() + interval '1 hour', 'payment gateway timeout after 10s (attempt 1)', '{"order": 4400, "card": "timeout"}')
		RETURNING id`).Scan(&retrying))
	_, err = runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{
		{Kind: "render-report", Payload: map[string]any{"report": "quarterly"}, InsertOpts: runtime.InsertOpts{Queue: "reports"}},
		{Kind: "render-report", Payload: map[string]any{"report": "yearly"}, InsertOpts: runtime.InsertOpts{Queue: "reports"}},
	})
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the mail, charge and running jobs settle", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs
			WHERE (kind = 'send-welcome' AND state = 'completed') OR (kind = 'charge' AND state = 'dead')
			   OR (kind = 'render-report' AND queue = 'webhooks' AND state = 'running')`).Scan(&n))
		return n == 40+5+2
	})
	seedHourOfMinutes(t, db)

	const token = "pages-test-token"
	srv := serve(t, db, token)
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/login?back=/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("queues")))

	// Overview: every queue with its depth, the paused one marked, the
	// charts drawn, dead jobs per kind with the latest error, the worker.
	queues := text(t, tab, "#queues")
	for _, q := range []string{"default", "mail", "reports", "webhooks"} {
		require.Contains(t, queues, q)
	}
	require.Regexp(t, `reports\s+2\s+0\s+0\s+0\s+[\d.]+ (ms|s)\s+paused`, text(t, tab, `tr[data-queue="reports"]`))
	require.Regexp(t, `mail\s+0\s+12\s+0`, text(t, tab, `tr[data-queue="mail"]`))
	require.Regexp(t, `webhooks\s+0\s+0\s+2`, text(t, tab, `tr[data-queue="webhooks"]`))
	require.Regexp(t, `charge\s+5\s+`, text(t, tab, "#dead-kinds"))
	// reports is paused on purpose: its wait is nobody's delay.
	require.Equal(t, "No job is waiting to run. Paused queues, left out: reports (2 runnable).", text(t, tab, "#oldest"))
	require.Contains(t, text(t, tab, "#workers"), "up")
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("queues")))
	bars, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart rect.completed").length`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, bars, 60, "an hour of minutes is drawn")
	screenshot(t, tab, "overview", true)

	// Jobs: a search, newest first.
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/jobs?queue=mail&state=pending"), chromedp.WaitVisible(chromedp.ID("jobs")))
	rows, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#jobs tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 12, rows)
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/jobs"), chromedp.WaitVisible(chromedp.ID("jobs")))
	screenshot(t, tab, "jobs", false)

	// The views the navigation leads to: scheduled (the 12 mails ahead and
	// the charge waiting to retry), retrying (that charge), running (the
	// two reports, each with how long it has run and its worker).
	count := func() int {
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#jobs tbody tr").length`))
		require.NoError(t, err)
		return n
	}
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.CSS(`nav a[href="/jobs?state=scheduled"]`)), chromedp.WaitVisible(chromedp.ID("jobs")))
	require.Equal(t, "Scheduled jobs: pending, due later", text(t, tab, "h1"))
	require.Equal(t, 13, count())
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.CSS(`nav a[href="/jobs?state=retrying"]`)), chromedp.WaitVisible(chromedp.ID("jobs")))
	require.Equal(t, 1, count())
	require.Equal(t, fmt.Sprint(retrying), text(t, tab, "#jobs tbody tr td.num a"))
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.CSS(`nav a[href="/jobs?state=running"]`)), chromedp.WaitVisible(chromedp.ID("jobs")))
	require.Equal(t, 2, count())
	var workerID string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM fila_workers`).Scan(&workerID))
	require.Equal(t, workerID, text(t, tab, "#jobs tbody tr [data-worker]"))
	require.Regexp(t, `^[\d.]+ (ms|s)$|^\d+m \d\ds$`, text(t, tab, "#jobs tbody tr [data-elapsed]"))
	screenshot(t, tab, "running", false)

	// A job's detail: payload, the error of every attempt, timings.
	var timeoutJob int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(id) FROM fila_jobs WHERE kind = 'charge' AND payload->>'card' = 'timeout'`).Scan(&timeoutJob))
	within(t, tab, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", srv.URL, timeoutJob)), chromedp.WaitVisible(chromedp.ID("errors")))
	require.Equal(t, "dead", text(t, tab, "#state"))
	require.Contains(t, text(t, tab, "#payload"), `"card": "timeout"`)
	errs := text(t, tab, "#errors")
	for attempt := 1; attempt <= 3; attempt++ {
		require.Contains(t, errs, fmt.Sprintf("payment gateway timeout after 10s (attempt %d)", attempt))
	}
	screenshot(t, tab, "job", true)

	// Dead jobs: select all with the page's script, retry them at once.
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/dead?kind=charge"), chromedp.WaitVisible(chromedp.ID("jobs")))
	screenshot(t, tab, "dead", true)
	require.Equal(t, "0 selected", text(t, tab, "[data-selected]"))
	disabled, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.querySelector('#bulk button[value=retry]').disabled`))
	require.NoError(t, err)
	require.True(t, disabled, "nothing selected, nothing to retry")
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.CSS("[data-select-all]")))
	require.Equal(t, "5 selected", text(t, tab, "[data-selected]"))
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.CSS("#bulk button[value=retry]")))
	waitForText(t, tab, 30*time.Second, "#flash", "retried 5 jobs")

	// They die again; then every dead charge is deleted at once, the
	// confirmation accepted.
	waitFor(t, 60*time.Second, "the retried charges dead again", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE kind = 'charge' AND state = 'dead'`).Scan(&n))
		return n == 5
	})
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/dead?kind=charge"), chromedp.WaitVisible(chromedp.ID("delete-kind")))
	_, err = chromedp.Run(tab, chromedp.Evaluate[bool](`window.confirm = () => true; true`))
	require.NoError(t, err)
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.ID("delete-kind")))
	waitForText(t, tab, 30*time.Second, "#flash", "deleted 5 dead jobs of kind charge")
	var dead int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'dead'`).Scan(&dead))
	require.Zero(t, dead)

	// The paused queue's listing says so; Resume from its banner.
	within(t, tab, 30*time.Second, chromedp.Navigate(srv.URL+"/jobs?queue=reports&state=pending"), chromedp.WaitVisible(chromedp.ID("paused-banner")))
	require.Regexp(t, `^Queue reports is paused \(for [^)]+\): no worker claims its jobs`, text(t, tab, "#paused-banner"))
	within(t, tab, 30*time.Second, chromedp.Click(chromedp.ID("resume")))
	waitForText(t, tab, 30*time.Second, "#flash", "resumed queue reports")
	paused, err := runtime.PausedQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, paused)
}

// seedHourOfMinutes writes an hour of fila_minutes rows for a worker that
// is not running, as if it had worked the mail and default queues all
// hour: a live test worker has only the last minute or two to show. It
// writes the current minute and the 61 before it: the chart shows the 60
// minutes before the one the page is drawn in and that one, so it still
// has a bar for each of the last 60 minutes when the minute turns before
// the page is drawn (without the current minute, at 18:00:00, 59 bars).
func seedHourOfMinutes(t *testing.T, db *testdb.DB) {
	t.Helper()
	// One "now" for every row: read per statement, a minute that turned
	// during the loop gave two rows the same minute.
	var now time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT date_trunc('minute', now())`).Scan(&now))
	for i := 0; i <= 61; i++ {
		for _, q := range []struct {
			name  string
			scale float64
		}{{"mail", 420}, {"default", 160}} {
			wave := 1 + 0.45*math.Sin(float64(i)/6.5) + 0.15*math.Sin(float64(i)*1.7)
			completed := int64(q.scale * wave)
			failed := int64(float64(completed) * (0.01 + 0.03*float64(i%9)/8))
			// Most pickups within 1-5 ms on the notify path; a few minutes
			// with a slow tail, as when the listener reconnected.
			b := make([]int64, len(runtime.PickupBuckets)+1)
			n := completed + failed
			b[0], b[1], b[2] = n*30/100, n*45/100, n*18/100
			b[3] = n - b[0] - b[1] - b[2]
			if i%17 == 5 {
				b[3] -= n * 8 / 100
				b[9] += n * 8 / 100
			}
			_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_minutes (minute, queue, worker, completed, failed, pickup_buckets, pickup_sum_ms)
				VALUES ($7::timestamptz - make_interval(mins => $1::int), $2::text, 'earlier-worker', $3::bigint, $4::bigint, $5::bigint[], $6::float8)`,
				i, q.name, completed, failed, b, float64(n)*2.1, now)
			require.NoError(t, err)
		}
	}
}

// TestChartsCountWhatWorkersDid checks the overview's hour totals against
// what a worker really did: it writes its minute to fila_minutes when it
// stops.
func TestChartsCountWhatWorkersDid(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rt, err := runtime.New(runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Queues: []string{"default", "mail"},
		RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, SafetyPoll: 10 * time.Minute,
		Kinds: []runtime.Kind{
			{Name: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }},
			{Name: "bad", Handler: func(context.Context, *runtime.Job) error { return runtime.Permanent(errors.New("no")) }},
		}})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	var jobs []runtime.InsertParams
	for range 30 {
		jobs = append(jobs, runtime.InsertParams{Kind: "ok", InsertOpts: runtime.InsertOpts{Queue: "mail"}})
	}
	for range 4 {
		jobs = append(jobs, runtime.InsertParams{Kind: "bad"})
	}
	_, err = runtime.InsertMany(ctx, db.Pool, jobs)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "every job finishes", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state IN ('completed', 'dead')`).Scan(&n))
		return n == 34
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(sctx))
	require.NoError(t, <-errc)

	srv := serve(t, db, "")
	code, body := get(t, client(t), srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<span id="hour-totals">30 completed, 4 failed</span>`)
	require.Contains(t, body, "34 pickups")
	require.Equal(t, 1, strings.Count(body, `<rect class="failed"`), "all in one minute")
}
