package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// StallWorker stops a `fila work` process with SIGSTOP while it runs a job:
// its heartbeats stop, but the job's command, in a process group of its
// own, runs on and finishes. The lease expires, another worker rescues the
// job and runs it again. Then SIGCONT: the stalled worker's late result
// must be rejected (fenced on the attempt, or dropped on the lost lease),
// and the job stays completed by its new owner.
func StallWorker(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		lease = 2 * time.Second
		// Seconds: half the lease, so the stalled command ends on its own
		// well before the lease (less the margin at which its worker gives
		// up the attempt) runs out.
		command = 1.0
	)
	res := &Result{Load: "1 job, 2 processes"}
	dir, cleanup, err := scenarioDir("stall")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "stall")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	args := []string{"--concurrency", "2", "--lease", lease.String(), "--exec", "job=" + recordingCommand(runFile, command)}
	stalled, err := env.startWorker(db, dir, 0, args...)
	if err != nil {
		return nil, err
	}
	defer stalled.kill()
	if err := env.waitListening(ctx, db, 1); err != nil {
		return nil, err
	}
	var id int64
	if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind) VALUES ('job') RETURNING id`).Scan(&id); err != nil {
		return nil, err
	}
	if !waitFor(ctx, 30*time.Second, func() bool { runs, _ := watch.runs(); return len(runs) == 1 }) {
		return nil, fmt.Errorf("the first worker did not start the job within 30s")
	}
	if runs, _ := watch.runs(); len(runs) != 1 || runs[0].ok {
		return nil, fmt.Errorf("the job finished before the worker could be stopped: make the command longer")
	}
	// Stopped once a heartbeat recorded that it runs the job, so that the
	// attempt counts (one stopped before it is given back by the rescue).
	if !waitFor(ctx, 30*time.Second, func() bool {
		var seen bool
		err := db.pool.QueryRow(ctx, `SELECT coalesce(heartbeat_at >= started_at, false) FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&seen)
		return err == nil && seen
	}) {
		return nil, fmt.Errorf("the first worker did not heartbeat the job within 30s")
	}
	env.progress("stopping worker 0 (pid %d) while its command runs", stalled.pid())
	if err := stalled.signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	stoppedAt := time.Now()
	// Another worker, to rescue the job once its lease expires.
	other, err := env.startWorker(db, dir, 1, args...)
	if err != nil {
		return nil, err
	}
	defer other.kill()
	if err := env.waitListening(ctx, db, 2); err != nil {
		return nil, err
	}
	var finishedAt time.Time
	var attempts int
	done := waitFor(ctx, 30*time.Second, func() bool {
		var state string
		err := db.pool.QueryRow(ctx, `SELECT state, attempts, coalesce(finished_at, now()) FROM fila_jobs WHERE id = $1::bigint`, id).
			Scan(&state, &attempts, &finishedAt)
		return err == nil && state == runtime.StateCompleted
	})
	res.check(done, "the job was not completed by another worker within 30s of the stall")
	if done {
		res.Recovery = time.Since(stoppedAt)
	}
	// Attempt 2 is the rescue. On a loaded machine the rescuer's own lease
	// of 2s can lapse too (its handler is stopped first, as it must be): a
	// third attempt is then correct, and the overlap check below still
	// covers every run.
	res.check(attempts >= 2, "the rescued job ended at attempt %d, want 2 or more", attempts)
	if attempts > 2 {
		res.note("the rescuer's lease lapsed too (a loaded machine): the job completed at attempt %d", attempts)
	}

	env.progress("resuming worker 0")
	if err := stalled.signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	// The resumed worker finds out its attempt is gone: either its handler
	// returns first and the write is fenced, or a heartbeat first finds the
	// lease lost and the result is dropped.
	const fenced, dropped = "result rejected", "lease lost while the handler ran"
	rejected := waitFor(ctx, 15*time.Second, func() bool { return containsAny(stalled.log(), fenced, dropped) })
	res.check(rejected, "the resumed worker did not report its result rejected within 15s")
	how := "dropped: a heartbeat found the lease lost"
	if strings.Contains(stalled.log(), fenced) {
		how = "fenced: the write of attempt 1 matched no row"
	}
	var state string
	var attemptsAfter int
	var finishedAfter time.Time
	if err := db.pool.QueryRow(ctx, `SELECT state, attempts, finished_at FROM fila_jobs WHERE id = $1::bigint`, id).
		Scan(&state, &attemptsAfter, &finishedAfter); err != nil {
		return nil, err
	}
	res.check(state == runtime.StateCompleted && attemptsAfter == attempts && finishedAfter.Equal(finishedAt),
		"after the stalled worker resumed the job is %s at attempt %d (finished %s, was %s): it overwrote the new owner's result",
		state, attemptsAfter, finishedAfter, finishedAt)

	// Both workers stop cleanly.
	for _, w := range []*workerProc{stalled, other} {
		_ = w.signal(syscall.SIGTERM)
		select {
		case <-w.exited:
			res.check(w.err == nil, "worker %d exited with %v after SIGTERM", w.n, w.err)
		case <-time.After(30 * time.Second):
			res.check(false, "worker %d did not exit within 30s of SIGTERM", w.n)
		}
	}
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	res.Lost = 0
	if state != runtime.StateCompleted {
		res.Lost = 1
	}
	res.overlapping(runs, time.Now())
	if _, err := res.measureMargins(ctx, db, runs); err != nil {
		return nil, err
	}
	ended := 0
	for _, r := range runs {
		if r.ok {
			ended++
		}
	}
	// The stalled command runs on while its worker is stopped: it usually
	// ends before the lease (it is half as long), and on a loaded machine
	// its exec guard may kill it first, at the attempt's deadline. Either
	// way the new owner's run, the last, ends; the overlap check says none
	// started before the stalled one was over. A stalled command that ended
	// is the second delivery a stall causes (the stalled worker could not
	// report in time); the fence keeps its result from counting.
	res.Duplicated = max(0, ended-1)
	res.check(len(runs) >= 2 && len(runs) <= attempts && runs[len(runs)-1].ok,
		"want the stalled run and the new owner's, the last ended, at most one per attempt: got %d runs (%d ended) for %d attempts", len(runs), ended, attempts)
	res.check(res.Overlapping == 0, "the new owner started before the stalled command ended")
	stalledRun := "ran on and ended while the worker was stopped"
	if len(runs) > 0 && !runs[0].ok {
		stalledRun = "was killed by its exec guard at the attempt's deadline (a loaded machine made it outlast the lease less the margin)"
	}
	res.note("stalled worker's command %s; the lease (%s) expired and the job ran again on the other worker, completed %s after the stall",
		stalledRun, lease, res.Recovery.Round(time.Millisecond))
	res.note("after SIGCONT the stalled worker's late result was %s; the job stays completed at attempt %d", how, attempts)
	if res.Duplicated > 0 {
		res.note("duplicated %d: the stalled command ran to its end as well as the new owner's, as at-least-once delivery allows when a worker cannot report in time; the fence kept the stale result from counting", res.Duplicated)
	}
	if !res.OK() {
		res.note("stalled worker's output: %s", stalled.logTail())
	}
	return res, nil
}
