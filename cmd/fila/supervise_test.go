package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// waitExit waits for a worker process to exit and returns its exit code.
func waitExit(t *testing.T, w *worker, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case <-done:
		return w.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the worker did not exit within %s", within)
		return 0
	}
}

// The first SIGTERM drains every group of the file together: a short job
// of one group finishes while a long one of the other runs on; the second
// SIGTERM cancels it, its job goes back to pending at once, and the process
// exits 0. Every runtime's logs carry its group.
func TestConfigGroupsDrainTogether(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	w := startConfigWorker(t, db, writeConfig(t, `shutdown_timeout: 1m
workers:
  - name: fast
    queues: [fast]
  - name: slow
    queues: [slow]
`))
	waitWorkersUp(t, db, 2)
	var short, long int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (queue, kind, payload) VALUES ('fast', 'sleep', '{"ms": 1500}') RETURNING id`).Scan(&short))
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (queue, kind, payload) VALUES ('slow', 'sleep', '{"ms": 600000}') RETURNING id`).Scan(&long))
	state := func(id int64) (s string) {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state FROM fila_jobs WHERE id = $1", id).Scan(&s))
		return s
	}
	waitFor(t, 30*time.Second, "both jobs running", func() bool {
		return state(short) == "running" && state(long) == "running"
	})

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	waitFor(t, 30*time.Second, "group fast drained: its job finished and its runtime stopped", func() bool {
		return state(short) == "completed" && countLog(w, "runtime stopped", map[string]any{"group": "fast"}) == 1
	})
	require.Equal(t, "running", state(long), "group slow still drains")
	require.Zero(t, countLog(w, "runtime stopped", map[string]any{"group": "slow"}))

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, waitExit(t, w, 30*time.Second))
	require.Equal(t, "pending", state(long), "the cancelled job is back at once, not after its lease")
	require.Equal(t, 1, countLog(w, "runtime stopped", map[string]any{"group": "slow"}))
	require.Equal(t, 1, countLog(w, "second signal: cancelling running jobs", map[string]any{"logger": "work"}))
	for _, g := range []string{"fast", "slow"} {
		require.Equal(t, 1, countLog(w, "runtime started", map[string]any{"group": g, "logger": "runtime"}), g)
	}
}

// A group that cannot go on (its listener reaches another database) stops
// the others, and the process exits 1 naming it.
func TestConfigGroupFailureStopsTheOthers(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	elsewhere := testdb.New(t)
	w := startConfigWorker(t, db, writeConfig(t, `workers:
  - name: good
  - name: bad
    queues: [other]
    listen_dsn: ${FILA_TEST_OTHER_DSN}
`), "FILA_TEST_OTHER_DSN="+elsewhere.DirectDSN)
	require.Equal(t, 1, waitExit(t, w, 60*time.Second))
	lines := strings.Split(strings.TrimSpace(w.stderr.String()), "\n")
	last := lines[len(lines)-1]
	require.Contains(t, last, "fila work: group bad: ListenDSN: ")
	require.Contains(t, last, "another database")
	require.Equal(t, 1, countLog(w, "a group stopped; stopping the others", map[string]any{"group": "bad"}))
	require.Equal(t, 1, countLog(w, "runtime stopped", map[string]any{"group": "good"}), "the good group was stopped, not abandoned")
}
