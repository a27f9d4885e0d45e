package main

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// The job-flow proofs with real `fila work` processes, one of them killed
// with SIGKILL in the middle: every run is recorded in a table, on the
// database's clock, and checked in SQL. No dependent starts before each of
// its dependencies completed; the jobs of a sequence never overlap and run
// in insertion order; each batch's callback is inserted exactly once.
func TestFlowsAcrossProcessesWithKill(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed: the recording command needs it")
	}
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE flow_runs (job bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL,
		what text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	record := func(what string) string {
		return fmt.Sprintf(`psql -qAtX "$FLOW_RUNS_DSN" -c "INSERT INTO flow_runs (job, attempt, worker, what) VALUES ($FILA_JOB_ID, $FILA_JOB_ATTEMPT, '$FILA_TEST_WORKER', '%s')"`, what)
	}
	command := record("start") + " && sleep 0.05 && " + record("end")
	start := func(name string) *exec.Cmd {
		cmd := filaCmd(db, "work", "--log-format", "json", "--exec", "step="+command, "--exec", "report="+command,
			"--concurrency", "6", "--lease", "6s")
		cmd.Env = append(cmd.Env, "FLOW_RUNS_DSN="+db.DirectDSN, "FILA_TEST_WORKER="+name)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("worker %s:\n%s", name, out.String())
			}
		})
		return cmd
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rows, err := db.Pool.Query(context.Background(), `SELECT id, kind, state, attempts, coalesce(last_error, ''),
			coalesce(CASE WHEN state = 'waiting' THEN (fila_flow_check(j)).reason END, '') FROM fila_jobs j WHERE state <> 'completed' ORDER BY id`)
		if err != nil {
			t.Logf("unfinished jobs: %v", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id                       int64
				attempts                 int
				kind, state, err, reason string
			)
			_ = rows.Scan(&id, &kind, &state, &attempts, &err, &reason)
			t.Logf("unfinished: job %d %s %s attempts %d error %q waiting %q", id, kind, state, attempts, err, reason)
		}
	})
	workers := []*exec.Cmd{start("w0"), start("w1"), start("w2")}
	waitWorkersUp(t, db, 3)

	// On a loaded machine a worker may miss its heartbeats more than once:
	// attempts enough that no job dies of it (the proof is of the order of
	// runs, not of their count).
	const many = 50
	// A workflow of 6 layers of 8, each job after two of the layer before.
	var flow []runtime.WorkflowJob
	for l := range 6 {
		for i := range 8 {
			j := runtime.WorkflowJob{Name: fmt.Sprintf("%d.%d", l, i), InsertParams: runtime.InsertParams{Kind: "step", InsertOpts: runtime.InsertOpts{MaxAttempts: many}}}
			if l > 0 {
				j.After = []string{fmt.Sprintf("%d.%d", l-1, i), fmt.Sprintf("%d.%d", l-1, (i+3)%8)}
			}
			flow = append(flow, j)
		}
	}
	_, err = runtime.InsertWorkflow(ctx, db.Pool, flow)
	require.NoError(t, err)
	// Twelve sequences of five, inserted interleaved.
	var seq []runtime.InsertParams
	for n := range 5 {
		for s := range 12 {
			seq = append(seq, runtime.InsertParams{Kind: "step", Payload: map[string]int{"n": n},
				InsertOpts: runtime.InsertOpts{Sequence: fmt.Sprintf("s%d", s), MaxAttempts: many}})
		}
	}
	_, err = runtime.InsertMany(ctx, db.Pool, seq)
	require.NoError(t, err)
	// Two batches of twenty.
	for b := range 2 {
		members := make([]runtime.InsertParams, 20)
		for i := range members {
			members[i] = runtime.InsertParams{Kind: "step", InsertOpts: runtime.InsertOpts{MaxAttempts: many}}
		}
		_, _, err := runtime.InsertBatch(ctx, db.Pool, members, runtime.BatchCallback{Kind: "report", Payload: map[string]int{"b": b}})
		require.NoError(t, err)
	}

	// SIGKILL one worker once a quarter of the runs started, and start
	// another in its place.
	waitFor(t, 120*time.Second, "a quarter of the runs started", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM flow_runs WHERE what = 'start'").Scan(&n)
		return n >= 37
	})
	require.NoError(t, workers[0].Process.Signal(syscall.SIGKILL))
	_ = workers[0].Wait()
	start("w3")

	const total = 48 + 60 + 40 + 2
	waitFor(t, 180*time.Second, "every job and callback completed", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == total
	})
	var states []string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT array_agg(DISTINCT state) FROM fila_jobs").Scan(&states))
	require.Equal(t, []string{"completed"}, states)

	// No dependent started before each of its dependencies completed.
	var early int
	require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT count(*) FROM fila_jobs j
JOIN fila_jobs d ON d.id = ANY (j.depends_on)
JOIN flow_runs r ON r.job = j.id AND r.what = 'start'
WHERE r.at <= d.finished_at OR r.at <= (SELECT max(e.at) FROM flow_runs e WHERE e.job = d.id)`).Scan(&early))
	require.Zero(t, early, "dependents started before a dependency completed")

	// A sequence's jobs in insertion order, each run of the next starting
	// after every run of the one before started and ended: never two at
	// once, never out of order.
	var disorder, pairs int
	require.NoError(t, db.Pool.QueryRow(ctx, `
WITH s AS (SELECT j.id, j.sequence_prev AS prev FROM fila_jobs j WHERE j.sequence_key IS NOT NULL AND j.sequence_prev IS NOT NULL)
SELECT count(*) FILTER (WHERE r.at <= (SELECT max(e.at) FROM flow_runs e WHERE e.job = s.prev)), count(*)
FROM s JOIN flow_runs r ON r.job = s.id AND r.what = 'start'`).Scan(&disorder, &pairs))
	require.Zero(t, disorder, "a sequence's job started before the one before it ended")
	require.GreaterOrEqual(t, pairs, 48)
	var badOrder int
	require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT count(*) FROM fila_jobs j JOIN fila_jobs p ON p.id = j.sequence_prev
WHERE (j.payload->>'n')::int <> (p.payload->>'n')::int + 1 OR j.sequence_key <> p.sequence_key`).Scan(&badOrder))
	require.Zero(t, badOrder, "each job's predecessor is the one inserted before it in its sequence")

	// Each batch's callback exactly once, with its counts.
	rows, err := db.Pool.Query(ctx, `SELECT b.id, b.callback_id, (SELECT count(*) FROM fila_jobs c WHERE c.kind = 'report' AND (c.payload->'batch'->>'id')::bigint = b.id),
		(SELECT c.payload->'batch'->>'completed' FROM fila_jobs c WHERE c.id = b.callback_id) FROM fila_batches b`)
	require.NoError(t, err)
	batches := 0
	for rows.Next() {
		var (
			id, callbacks int64
			callback      *int64
			completed     string
		)
		require.NoError(t, rows.Scan(&id, &callback, &callbacks, &completed))
		require.NotNil(t, callback, "batch %d", id)
		require.EqualValues(t, 1, callbacks, "batch %d's callbacks", id)
		require.Equal(t, "20", completed, "batch %d", id)
		batches++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 2, batches)

	var killedRuns int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM flow_runs s WHERE s.what = 'start' AND s.worker = 'w0'
		AND NOT EXISTS (SELECT 1 FROM flow_runs e WHERE e.what = 'end' AND e.job = s.job AND e.attempt = s.attempt AND e.worker = 'w0')`).Scan(&killedRuns))
	t.Logf("runs cut by the SIGKILL: %d", killedRuns)
}
