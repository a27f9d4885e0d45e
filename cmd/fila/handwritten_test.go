package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/ui"
)

// The jobs table is a public interface: every command, the dashboard and a
// worker handle every row the constraints accept, as other programs and
// operators write them by hand (see handWritten).
func TestEveryCommandOnHandWrittenRows(t *testing.T) {
	t.Parallel()
	db := seededForStats(t)
	ctx := context.Background()
	var ids []int64
	rows, err := db.Pool.Query(ctx, `SELECT id FROM fila_jobs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())

	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := fila(t, db, args...)
		require.Zero(t, code, "fila %s: %s", strings.Join(args, " "), errOut)
		return out
	}
	ok("migrate")
	ok("stats")
	ok("stats", "--json")
	ok("trigger")
	ok("queue", "paused")
	ok("recurring", "list")
	for _, state := range []string{"", "pending", "running", "completed", "dead", "cancelled"} {
		args := []string{"jobs", "list"}
		if state != "" {
			args = append(args, "--state", state)
		}
		ok(args...)
		ok(append(args, "--json")...)
	}
	for _, id := range ids {
		out := ok("jobs", "show", fmt.Sprint(id))
		require.Contains(t, out, fmt.Sprint(id))
		ok("jobs", "show", fmt.Sprint(id), "--json")
	}

	// The dashboard renders every page on these rows.
	h, err := ui.New(db.Pool, ui.Options{}, zaptest.NewLogger(t))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	pages := []string{"/", "/jobs", "/dead", "/jobs?state=running", "/jobs?state=completed"}
	for _, id := range ids {
		pages = append(pages, fmt.Sprintf("/jobs/%d", id))
	}
	for _, p := range pages {
		res, err := http.Get(srv.URL + p)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, p)
	}

	// Operators' actions.
	out := ok("jobs", "retry", "--state", "dead")
	require.Contains(t, out, "retried 3 dead jobs")
	ok("enqueue", "--kind", "invoice", "--queue", "orders", "--allow-unknown-kind")

	// A worker runs everything that is due, rescues the running job whose
	// lease had expired, and leaves alone the one whose lease is alive.
	var expired int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM fila_jobs WHERE state = 'running' AND last_error = 'lost lease'`).Scan(&expired))
	w := startWorker(t, db, "--queue", "orders", "--queue", "mail.v2", "--lease", "10s",
		"--exec", "invoice=true", "--exec", "send welcome=true", "--exec", "sms=true")
	waitFor(t, 60*time.Second, "every due job ran", func() bool {
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs
			WHERE (state = 'pending' AND run_at <= now()) OR (state = 'running' AND lease_until < now())`).Scan(&left))
		return left == 0
	})
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait())
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT attempts FROM fila_jobs WHERE id = $1::bigint`, expired).Scan(&attempts))
	// No heartbeat of that attempt is recorded, so no worker was seen to run
	// it: the rescue gave it back, as it does an attempt whose claim reply
	// was lost.
	require.Equal(t, 3, attempts, "the job found running with an expired lease at attempt 3, never heartbeated, ran as attempt 3 again")
	ok("stats", "--check", "--max-oldest", "1h")
}
