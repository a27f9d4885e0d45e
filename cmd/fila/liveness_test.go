package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/migrations"
)

// workerID reads a worker's id from its log.
func workerID(t *testing.T, w *worker) string {
	t.Helper()
	var id string
	waitFor(t, 60*time.Second, "the worker logs its id", func() bool {
		for _, e := range logEntries(w) {
			if e["msg"] == "runtime started" {
				id, _ = e["worker_id"].(string)
				return id != ""
			}
		}
		return false
	})
	return id
}

// TestKilledWorkerLeavesEveryView: of two worker processes refreshing
// their rows every second, one is SIGKILLed. It leaves `fila stats` (text
// and JSON), the dashboard, the other's /metrics and `fila migrate`'s
// check for live workers once it has missed three refreshes, while the
// one that runs on stays in all of them. The times are measured and
// logged; the only bound asserted is a generous one.
// FILA_TEST_LIVENESS_INTERVAL runs it at another interval (the default,
// 5s, takes some 20 s).
func TestKilledWorkerLeavesEveryView(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	interval := time.Second
	if v := os.Getenv("FILA_TEST_LIVENESS_INTERVAL"); v != "" {
		var err error
		interval, err = time.ParseDuration(v)
		require.NoError(t, err, "FILA_TEST_LIVENESS_INTERVAL")
	}
	killed := startWorkerOutput(t, db, "--liveness-interval", interval.String(), "--exec", "k=true")
	kept := startWorkerOutput(t, db, "--liveness-interval", interval.String(), "--exec", "k=true",
		"--metrics-addr", "127.0.0.1:0", "--ui-addr", "127.0.0.1:0")
	killedID, keptID := workerID(t, killed), workerID(t, kept)
	metricsURL := "http://" + servingAddr(t, kept, "/metrics") + "/metrics"
	ui := dashboardURL(t, kept)

	statsJSON := func() map[string]stats.Worker {
		out, errOut, code := fila(t, db, "stats", "--json")
		require.Zero(t, code, errOut)
		var s stats.Snapshot
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		ws := map[string]stats.Worker{}
		for _, w := range s.Workers {
			ws[w.ID] = w
		}
		return ws
	}
	statsText := func() string {
		out, errOut, code := fila(t, db, "stats")
		require.Zero(t, code, errOut)
		return out
	}
	liveMetric := func() float64 {
		f := parseMetrics(t, get(t, metricsURL, http.StatusOK))
		return sample(f, "fila_live_workers", "queue", "default", "wake_source", "up")
	}
	dashboard := func() string { return get(t, ui+"/", http.StatusOK) }
	guard := func() string {
		_, errOut, code := fila(t, db, "migrate", "--to", strconv.Itoa(migrations.Latest()-1))
		require.Equal(t, 1, code, "a live worker refuses the rollback")
		return errOut
	}

	waitFor(t, 60*time.Second, "both workers in every view", func() bool {
		ws := statsJSON()
		_, a := ws[killedID]
		_, b := ws[keptID]
		return a && b && liveMetric() == 2 && strings.Contains(dashboard(), killedID) && strings.Contains(dashboard(), keptID)
	})
	ws := statsJSON()
	require.Equal(t, interval.Seconds(), ws[keptID].LivenessIntervalSeconds)
	require.Less(t, ws[keptID].LastSeenSeconds, 3*interval.Seconds(), "its age is shown")
	require.Contains(t, guard(), "2 workers are live")
	fields := row(t, statsText(), keptID)
	require.Regexp(t, `^[\d.]+m?s$`, fields[len(fields)-2], "the text shows each worker's last-seen age")
	require.Equal(t, "ago", fields[len(fields)-1])

	require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
	_ = killed.cmd.Wait()
	killedAt := time.Now()

	// Each view is polled until the killed worker is gone from it; the one
	// that runs on must be in every answer meanwhile.
	gone := map[string]time.Duration{}
	waitFor(t, 60*time.Second+5*interval, "the killed worker gone from every view", func() bool {
		ws := statsJSON()
		_, stillThere := ws[killedID]
		_, keptThere := ws[keptID]
		require.True(t, keptThere, "the live worker stays in stats")
		if _, ok := gone["stats --json"]; !ok && !stillThere {
			gone["stats --json"] = time.Since(killedAt)
		}
		if _, ok := gone["stats"]; !ok {
			out := statsText()
			require.Contains(t, out, keptID)
			if !strings.Contains(out, killedID) {
				gone["stats"] = time.Since(killedAt)
			}
		}
		if _, ok := gone["dashboard"]; !ok {
			page := dashboard()
			require.Contains(t, page, keptID)
			if !strings.Contains(page, killedID) {
				gone["dashboard"] = time.Since(killedAt)
			}
		}
		if _, ok := gone["metrics"]; !ok {
			n := liveMetric()
			require.GreaterOrEqual(t, n, 1.0, "the live worker stays in the metrics")
			if n == 1 {
				gone["metrics"] = time.Since(killedAt)
			}
		}
		if _, ok := gone["migrate"]; !ok {
			msg := guard()
			require.Contains(t, msg, keptID)
			if !strings.Contains(msg, killedID) {
				gone["migrate"] = time.Since(killedAt)
			}
		}
		return len(gone) == 5
	})
	for view, after := range gone {
		t.Logf("killed worker gone from %s %s after SIGKILL (liveness interval %s)", view, after.Round(10*time.Millisecond), interval)
	}

	// The live worker stays, three intervals more.
	for until := time.Now().Add(3 * interval); time.Now().Before(until); {
		_, ok := statsJSON()[keptID]
		require.True(t, ok, "the live worker stays in stats")
	}
	require.Contains(t, statsText(), "1 gone (missed 3 refreshes of their row")
}
