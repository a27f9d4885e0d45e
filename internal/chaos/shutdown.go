package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fila-run/fila/runtime"
)

// ShutdownUnderLoad sends SIGTERM to a `fila work` process running long and
// short jobs. The short ones running finish and are completed; nothing new
// is claimed; the long ones run on until a second SIGTERM (first round) or
// the shutdown timeout (second round) cancels them, and they go back to
// pending at once. Afterwards no job is left running with a live lease, and
// the cancelled commands are gone.
func ShutdownUnderLoad(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	res := &Result{Load: "2 × (4 long + 20 short jobs), 1 process"}
	dir, cleanup, err := scenarioDir("shutdown")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "shutdown")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	for round, how := range []string{"second signal", "shutdown timeout"} {
		r, err := env.shutdownRound(ctx, db, dir, runFile, watch, round, how == "second signal")
		if err != nil {
			return nil, err
		}
		for _, f := range r.Failures {
			res.Failures = append(res.Failures, how+": "+f)
		}
		res.Notes = append(res.Notes, r.Notes...)
		res.Lost += r.Lost
	}
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	res.Duplicated = len(okTwice(runs))
	res.overlapping(runs, time.Now())
	res.check(res.Duplicated == 0, "jobs ran to the end twice: %v", okTwice(runs))
	res.check(res.Overlapping == 0, "jobs run twice at once")
	return res, nil
}

// stoppingMsg is what `fila work` logs when it takes the first signal and
// stops claiming.
const stoppingMsg = "stopping: finishing running jobs"

func (e *Env) shutdownRound(ctx context.Context, db *database, dir, runFile string, watch *runWatch, round int, secondSignal bool) (*Result, error) {
	res := &Result{}
	const (
		long, short = 4, 20
		timeout     = 2 * time.Second
		shortRun    = 500 * time.Millisecond
	)
	shutdownTimeout := time.Minute
	if !secondSignal {
		shutdownTimeout = timeout
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM fila_jobs`); err != nil {
		return nil, err
	}
	w, err := e.startWorker(db, dir, round, "--concurrency", "6", "--shutdown-timeout", shutdownTimeout.String(),
		"--exec", "long="+recordingCommand(runFile, 120), "--exec", "short="+recordingCommand(runFile, shortRun.Seconds()))
	if err != nil {
		return nil, err
	}
	defer w.kill()
	if err := e.waitListening(ctx, db, 1); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, priority) SELECT 'long', 0 FROM generate_series(1, $1::int)`, long); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, priority) SELECT 'short', 1 FROM generate_series(1, $1::int)`, short); err != nil {
		return nil, err
	}
	// SIGTERM while the long jobs and two short ones run.
	running := func() (l, s int) {
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'long'), count(*) FILTER (WHERE kind = 'short')
			FROM fila_jobs WHERE state = 'running'`).Scan(&l, &s)
		return
	}
	if !waitFor(ctx, 30*time.Second, func() bool { l, s := running(); return l == long && s > 0 }) {
		return nil, fmt.Errorf("the long jobs and a short one were not running within 30s")
	}
	before, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	// A claim the worker sent just before it took the signal may run on
	// the server later, by as long as a statement takes to get there under
	// this load (through PgBouncer, when the pass uses it): measured by
	// probes on the same path, right after the signal.
	probe, err := pgconn.Connect(ctx, db.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect the probe: %w", err)
	}
	defer probe.Close(context.Background())
	e.progress("SIGTERM to worker %d (then %s)", w.n, map[bool]string{true: "a second signal", false: "its shutdown timeout"}[secondSignal])
	if err := w.signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	termAt := time.Now()
	var inFlight time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := probe.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		inFlight = max(inFlight, time.Since(t0))
	}
	// The short jobs running at SIGTERM finish; nothing new is claimed.
	drained := waitFor(ctx, 20*time.Second, func() bool { _, s := running(); return s == 0 })
	res.check(drained, "the short jobs running at SIGTERM did not finish within 20s")
	var hardAt time.Time
	if secondSignal {
		res.check(w.running(), "the worker exited before its long jobs were cancelled")
		// A signal within 100 ms of the first is the same stop (fila work's
		// hardStopGap): the second must come later.
		time.Sleep(time.Until(termAt.Add(200 * time.Millisecond)))
		hardAt = time.Now()
		if err := w.signal(syscall.SIGTERM); err != nil {
			return nil, err
		}
	} else {
		hardAt = termAt.Add(timeout)
	}
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		res.check(false, "the worker did not exit within 30s of the hard stop")
		w.kill()
	}
	exit := time.Since(hardAt)
	res.check(w.err == nil, "the worker exited with %v", w.err)
	stopped := time.Since(termAt)

	after, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	// The snapshot and the signal are not one instant: a slot that a short
	// job freed in between may be refilled before the worker takes the
	// signal. A job claimed before the worker logged that it was stopping
	// was claimed before SIGTERM as far as it could know.
	tookSignal, logged := w.loggedAt(stoppingMsg)
	if !logged {
		tookSignal = termAt
		res.check(false, "the worker never logged %q", stoppingMsg)
	}
	// The log's time is to the millisecond, the claim's to the microsecond;
	// and a claim in flight at the signal runs up to inFlight later.
	tookSignal = tookSignal.Add(time.Millisecond + inFlight)
	var completed, returned, untouched, refilled int
	var returnedShort []int64
	for id, s := range after {
		b := before[id]
		switch {
		case s.state == runtime.StateRunning || s.liveLease:
			res.Lost++
			res.check(false, "job %d left %s with a live lease %v", id, s.state, s.liveLease)
		case b.state == runtime.StateRunning && s.state == runtime.StateCompleted:
			completed++
		case b.state == runtime.StateRunning && s.state == runtime.StatePending:
			returned++
			if s.kind == "short" {
				returnedShort = append(returnedShort, id)
			}
			// An interrupted attempt is not counted, and its history says why.
			var history string
			if err := db.pool.QueryRow(ctx, `SELECT errors::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&history); err != nil {
				return nil, err
			}
			res.check(s.attempts == b.attempts-1 && containsAny(history, "shutdown"),
				"job %d returned with %d attempts counted (was %d) and error history %s", id, s.attempts, b.attempts, history)
		case b.state == runtime.StatePending && s.state == runtime.StatePending:
			untouched++
			res.check(s.attempts == b.attempts, "job %d was claimed after SIGTERM", id)
		case b.state == runtime.StateCompleted && s.state == runtime.StateCompleted:
		case b.state == runtime.StatePending && s.state == runtime.StateCompleted:
			var started time.Time
			if err := db.pool.QueryRow(ctx, `SELECT started_at FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&started); err != nil {
				return nil, err
			}
			refilled++
			res.check(started.Before(tookSignal), "job %d was claimed %s after the worker took SIGTERM and a statement's longest trip then (%s)",
				id, started.Sub(tookSignal).Round(time.Millisecond), inFlight.Round(time.Millisecond))
		default:
			res.check(false, "job %d went from %s to %s", id, b.state, s.state)
		}
	}
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	// A short job cut by the shutdown timeout is a failure only if its
	// command had time to finish: it started at least its run time and a
	// second of slack before the deadline. One claimed just before SIGTERM
	// whose command the loaded machine started late was rightly stopped.
	for _, id := range returnedShort {
		var started time.Time
		for _, r := range runs {
			if r.job == id && r.worker == w.n {
				started = r.start
			}
		}
		switch {
		case secondSignal:
			res.check(false, "short job %d was cancelled by the second signal instead of finishing", id)
		case started.IsZero():
			res.note("short job %d was claimed before SIGTERM but its command had not started by the %s deadline", id, timeout)
		case started.Add(shortRun + time.Second).Before(hardAt):
			res.check(false, "short job %d started %s after SIGTERM and was still running at the %s deadline",
				id, started.Sub(termAt).Round(time.Millisecond), timeout)
		default:
			res.note("short job %d started only %s after SIGTERM, too late to finish before the %s deadline",
				id, started.Sub(termAt).Round(time.Millisecond), timeout)
		}
	}
	res.check(returned-len(returnedShort) == long, "%d long jobs went back to pending, want %d", returned-len(returnedShort), long)
	// The cancelled commands died with their handlers: none wrote an end.
	for _, r := range runs {
		if r.worker == w.n && r.ok && r.end.After(hardAt.Add(time.Second)) {
			res.check(false, "a command of job %d ended %s after the hard stop", r.job, r.end.Sub(hardAt).Round(time.Millisecond))
		}
	}
	how := "second SIGTERM"
	if !secondSignal {
		how = fmt.Sprintf("shutdown timeout (%s)", timeout)
	}
	if refilled > 0 {
		res.note("%d short jobs were claimed between the snapshot and the worker taking SIGTERM (it logged so %s after the signal was sent, to the millisecond; a statement's longest trip then was %s), and completed",
			refilled, max(0, tookSignal.Sub(termAt)-inFlight-time.Millisecond).Round(time.Millisecond), inFlight.Round(time.Millisecond))
	}
	res.note("%s: after SIGTERM %d running short jobs finished and were completed, %d pending ones were not claimed; "+
		"the %s cancelled %d long jobs, back to pending at once; the worker exited %s after it, %s after SIGTERM",
		how, completed, untouched, how, returned-len(returnedShort), exit.Round(time.Millisecond), stopped.Round(time.Millisecond))
	if !res.OK() {
		res.note("worker output: %s", w.logTail())
	}
	return res, nil
}
