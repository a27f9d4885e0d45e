package main

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// dashboardURL reads from a worker's log the URL its dashboard serves.
func dashboardURL(t *testing.T, w *worker) string {
	t.Helper()
	var base string
	waitFor(t, 30*time.Second, "the worker logs its dashboard's URL", func() bool {
		for _, e := range logEntries(w) {
			if e["msg"] == "dashboard serving" && e["logger"] == "ui" {
				base = strings.TrimSuffix(e["url"].(string), "/")
				return true
			}
		}
		return false
	})
	return base
}

// A worker serves the dashboard, with --ui-addr or ui_addr, its admin
// token from --admin-token or a reference in the file; the dashboard
// answers until the worker has stopped.
func TestWorkServesTheDashboard(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	flags := startWorkerOutput(t, db, "--ui-addr", "127.0.0.1:0", "--admin-token", "flag-token-of-the-worker")
	file := startConfigWorker(t, db, writeConfig(t, `ui_addr: 127.0.0.1:0
ui_admin_token: ${FILA_TEST_UI_TOKEN}
workers:
  - name: all
`), "FILA_TEST_UI_TOKEN=file-token-of-the-worker")

	for _, c := range []struct {
		w            *worker
		token, queue string
	}{{flags, "flag-token-of-the-worker", "from-flags"}, {file, "file-token-of-the-worker", "from-file"}} {
		base := dashboardURL(t, c.w)
		code, body := httpGet(t, base+"/")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="token"`, "with a token, reading needs a login")
		pause := url.Values{"op": {"pause"}, "queue": {c.queue}}
		code, _ = httpPost(t, base+"/actions/queues", pause, "wrong")
		require.Equal(t, http.StatusForbidden, code)
		code, body = httpPost(t, base+"/actions/queues", pause, c.token)
		require.Equal(t, http.StatusOK, code, body)
	}
	paused, err := runtime.PausedQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"from-file", "from-flags"}, paused)

	for _, w := range []*worker{flags, file} {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, w.cmd.Wait())
		var order []string
		for _, e := range logEntries(w) {
			if m, _ := e["msg"].(string); m == "runtime stopped" || m == "dashboard stopping" {
				order = append(order, m)
			}
		}
		require.Equal(t, []string{"runtime stopped", "dashboard stopping"}, order, "the dashboard outlives the worker's drain")
	}

	_, errOut, code := fila(t, db, "work", "--admin-token", "t")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--admin-token: there is no dashboard to protect: set --ui-addr too")
	_, errOut, code = fila(t, db, "work", "--ui-addr", "8080")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `--ui-addr: "8080": want HOST:PORT`)
	_, errOut, code = fila(t, db, "work", "--read-token", "a-read-token-long-enough")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--read-token: there is no dashboard to protect: set --ui-addr too")
	_, errOut, code = fila(t, db, "work", "--ui-addr", "127.0.0.1:0", "--admin-token", "short")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--admin-token: the token is 5 characters long: at least 16 are needed")
}
