package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// escapingChildren is shell that starts four children meant to outlive
// their command, each reported to the run file: one in a session of its
// own (setsid: outside the command's process group), one in the
// background, one double-forked (orphaned: outside the command's tree),
// and one both.
func escapingChildren(file string) string {
	pid := stampLine(file, "pid", "$!")
	return fmt.Sprintf("setsid sleep 60 & %s; sleep 60 & %s; (sleep 60 & %s) & a=$!; (setsid sleep 60 & %s) & b=$!; wait $a $b",
		pid, pid, pid, pid)
}

// EscapingDescendants runs --exec commands that start children meant to
// escape (setsid, background, double fork) and checks that every
// descendant is dead when the attempt ends, however it ends: (i) the job
// is cancelled (fila jobs cancel), (ii) it times out (--timeout), (iii) its
// worker loses the lease (cut off by a silent partition; another worker
// rescues the job), (iv) the command exits 0 while a background child
// holds its stdout and stderr open, and (v) exits 3 the same way. A
// command's exit ends its attempt at once with its own status: completed
// at its first attempt for (iv), dead with "exit status 3" for (v) — not
// a "WaitDelay expired" failure and a retry.
func EscapingDescendants(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		lease = partitionLease
		// timeout leaves a loaded machine time to start the command's six
		// processes before it fires: at 2s, beside other tests, a first
		// run was killed before its last child started, and the check that
		// every child had started waited in vain.
		timeout = 2 * lease
		// cancelBound: a cancel is seen by the next heartbeat (within
		// Lease/3); a command that outlives the cancel by this much was not
		// stopped.
		cancelBound = 2 * lease
	)
	res := &Result{Load: "5 commands × 4 escaping children, lease 3s"}
	dir, cleanup, err := scenarioDir("escape")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "escape")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	clk, err := measureClock(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	defer watch.killAlive()
	start, end := stampLine(runFile, "start", ""), stampLine(runFile, "end", "")
	children := escapingChildren(runFile)
	long := fmt.Sprintf("sleep 60 & p=$!; %s; wait $p; %s", stampLine(runFile, "pid", "$p"), end)
	commands := map[string]string{
		"esc-cancel":  fmt.Sprintf("%s; %s; %s", start, children, long),
		"esc-timeout": fmt.Sprintf("%s; %s; %s", start, children, long),
		"esc-exit0":   fmt.Sprintf("%s; %s; echo started; %s; exit 0", start, children, end),
		"esc-exit3":   fmt.Sprintf("%s; %s; echo failing >&2; exit 3", start, children),
		"esc-lease": fmt.Sprintf("%s; %s", start, firstRun(filepath.Join(dir, "first"),
			children+"; "+long, "sleep 0.5; "+end)),
	}
	// Processes each command's first run reports: its shell, the four
	// children and, for the long ones, its own sleep.
	wantProcs := map[string]int{"esc-cancel": 6, "esc-timeout": 6, "esc-exit0": 5, "esc-exit3": 5, "esc-lease": 6}
	maxAttempts := map[string]int{"esc-cancel": 1, "esc-timeout": 1, "esc-exit0": 2, "esc-exit3": 1, "esc-lease": 5}
	wantState := map[string]string{"esc-cancel": runtime.StateCancelled, "esc-timeout": runtime.StateDead, "esc-exit0": runtime.StateCompleted, "esc-exit3": runtime.StateDead, "esc-lease": runtime.StateCompleted}
	kinds := []string{"esc-cancel", "esc-timeout", "esc-exit0", "esc-exit3", "esc-lease"}

	args := []string{"--concurrency", "4", "--lease", lease.String(), "--timeout", "esc-timeout=" + timeout.String()}
	for _, k := range kinds[:4] {
		args = append(args, "--exec", k+"="+commands[k])
	}
	worker, err := env.startWorker(db, dir, 0, args...)
	if err != nil {
		return nil, err
	}
	defer worker.kill()
	c, err := newCut(db)
	if err != nil {
		return nil, err
	}
	defer c.close()
	leaseArgs := []string{"--concurrency", "1", "--lease", lease.String(), "--exec", "esc-lease=" + commands["esc-lease"]}
	victim, err := env.startWorkerOn(c.mainDSN, c.listenDSN, dir, 1, leaseArgs...)
	if err != nil {
		return nil, err
	}
	defer victim.kill()
	if err := env.waitListening(ctx, db, 2); err != nil {
		return nil, err
	}
	jobIDs := map[string]int64{}
	for _, k := range kinds {
		var id int64
		if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ($1::text, $2::int) RETURNING id`, k, maxAttempts[k]).Scan(&id); err != nil {
			return nil, err
		}
		jobIDs[k] = id
	}
	// Every command's first run has started its children.
	firstRunOf := func(runs []run, id int64) *run {
		jr := runsOf(runs, id)
		if len(jr) == 0 {
			return nil
		}
		return &jr[0]
	}
	if !waitFor(ctx, 30*time.Second, func() bool {
		runs, _ := watch.runs()
		for _, k := range kinds {
			if r := firstRunOf(runs, jobIDs[k]); r == nil || len(r.procs) < wantProcs[k] {
				return false
			}
		}
		return true
	}) {
		return nil, fmt.Errorf("the commands did not all start their children within 30s")
	}
	env.progress("cancelling job %d, cutting worker 1 off from the database", jobIDs["esc-cancel"])
	if _, err := env.fila(ctx, db, "jobs", "cancel", strconv.FormatInt(jobIDs["esc-cancel"], 10)); err != nil {
		return nil, err
	}
	cancelAt := wall(time.Now())
	c.set(freeze)
	rescuer, err := env.startWorker(db, dir, 2, leaseArgs...)
	if err != nil {
		return nil, err
	}
	defer rescuer.kill()
	settled := waitFor(ctx, 30*time.Second+2*lease, func() bool {
		for _, k := range kinds {
			f, err := readJob(ctx, db, jobIDs[k])
			if err != nil || f.state == runtime.StatePending || f.state == runtime.StateRunning {
				return false
			}
		}
		return true
	})
	res.check(settled, "the jobs were still pending or running %s after the faults", 30*time.Second+2*lease)
	c.set(forward)
	// When each attempt ended: its outcome's time for the ones that end by
	// an outcome, the rescue for the lost lease, the cancel for the
	// cancelled one (bounded: the cancel only reaches the worker with its
	// next heartbeat).
	exps, err := leaseExpiries(ctx, db, clk)
	if err != nil {
		return nil, err
	}
	finals := map[string]jobFinal{}
	ended := map[string]time.Time{}
	for _, k := range kinds {
		if finals[k], err = readJob(ctx, db, jobIDs[k]); err != nil {
			return nil, err
		}
		switch k {
		case "esc-cancel":
			ended[k] = cancelAt.Add(cancelBound)
		case "esc-lease":
			for _, x := range exps {
				if x.job == jobIDs[k] {
					ended[k] = x.rescuedAt
					break
				}
			}
		default:
			if !finals[k].finishedAt.IsZero() {
				ended[k] = clk.local(finals[k].finishedAt)
			}
		}
	}
	// Let every process that is going to die die, then look.
	latest := cancelAt.Add(cancelBound)
	for _, t := range ended {
		if t.After(latest) {
			latest = t
		}
	}
	allDead := func() bool {
		runs, _ := watch.runs()
		for _, r := range runs {
			for _, p := range r.procs {
				if p.alive {
					return false
				}
			}
		}
		return true
	}
	_ = pollFor(ctx, time.Until(latest.Add(time.Second)), 10*time.Millisecond, allDead)
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var worstLate time.Duration
	first := true
	for _, k := range kinds {
		id := jobIDs[k]
		r := firstRunOf(runs, id)
		if r == nil {
			res.check(false, "job %d (%s) has no run", id, k)
			continue
		}
		at, ok := ended[k]
		if !ok {
			res.check(false, "job %d (%s): cannot tell when its attempt ended (state %s)", id, k, finals[k].state)
			continue
		}
		var survivors []string
		var last time.Time
		alive := false
		for _, p := range r.procs {
			alive = alive || p.alive
			if p.lastAlive.After(last) {
				last = p.lastAlive
			}
			if p.alive || !p.lastAlive.Before(at) {
				role := "its shell"
				if p.child {
					role = "a child"
				}
				state := fmt.Sprintf("seen alive %s after", p.lastAlive.Sub(at).Round(time.Millisecond))
				if p.alive {
					state = "still alive " + wall(now).Sub(at).Round(time.Millisecond).String() + " after"
				}
				survivors = append(survivors, fmt.Sprintf("pid %d (%s) %s", p.pid, role, state))
			}
		}
		what := map[string]string{
			"esc-cancel":  "cancelled (the bound: " + cancelBound.String() + " after the cancel)",
			"esc-timeout": "timed out",
			"esc-exit0":   "exited 0 with a background child holding its output",
			"esc-exit3":   "exited 3 with a background child holding its output",
			"esc-lease":   "its worker lost the lease (rescued)",
		}[k]
		res.check(len(survivors) == 0, "job %d, %s: descendants outlived the attempt: %s", id, what, strings.Join(survivors, "; "))
		switch {
		case k == "esc-cancel" && alive:
			res.note("cancelled: some of the command's processes still alive %s after the cancel", last.Sub(cancelAt).Round(time.Millisecond))
		case k == "esc-cancel":
			res.note("cancelled: the last of the command's %d processes was gone %s after the cancel", len(r.procs), last.Sub(cancelAt).Round(time.Millisecond))
		case first:
			worstLate, first = last.Sub(at), false
		default:
			worstLate = max(worstLate, last.Sub(at))
		}
		f := finals[k]
		if f.state != wantState[k] {
			res.Lost++
			res.check(false, "job %d (%s) ended %s at attempt %d, want %s: %s", id, k, f.state, f.attempts, wantState[k], firstLine(f.lastError))
		}
		var history string
		if err := db.pool.QueryRow(ctx, `SELECT errors::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&history); err != nil {
			return nil, err
		}
		res.check(!strings.Contains(history, "WaitDelay"), "job %d (%s): an attempt failed waiting for the command's output: %s", id, k, firstLine(history))
		switch k {
		case "esc-exit0":
			res.check(f.attempts == 1 && len(runsOf(runs, id)) == 1, "job %d (exit 0): completed at attempt %d after %d runs, want its first", id, f.attempts, len(runsOf(runs, id)))
			if !r.wrote.IsZero() && !f.finishedAt.IsZero() {
				res.note("exit 0 with a child holding its output: %s at attempt %d, %s after the command's exit",
					f.state, f.attempts, clk.local(f.finishedAt).Sub(r.wrote).Round(time.Millisecond))
			}
		case "esc-exit3":
			res.check(strings.Contains(f.lastError, "exit status 3"), "job %d (exit 3): last_error %q does not give the command's exit status", id, firstLine(f.lastError))
			res.note("exit 3 with a child holding its output: %s at attempt %d, %s after the command started: %s", f.state, f.attempts,
				clk.local(f.finishedAt).Sub(r.start).Round(time.Millisecond), firstLine(f.lastError))
		case "esc-timeout":
			res.note("timed out after %s: %s at attempt %d, %s after the command started", timeout, f.state, f.attempts, clk.local(f.finishedAt).Sub(r.start).Round(time.Millisecond))
		}
	}
	margins := rescueMargins(runs, exps, now)
	res.recordMargins(margins)
	res.overlapping(runs, now)
	res.Duplicated = len(okTwice(runs))
	if worstLate < 0 {
		res.note("every process of the commands that timed out, exited or lost their lease (4 children each: setsid, background, double fork, both) was gone when its attempt ended (its outcome written, or its rescue): the last %s before", millis(-worstLate))
	} else {
		res.note("a process of a command that timed out, exited or lost its lease outlived its attempt (its outcome written, or its rescue) by %s or more", millis(worstLate))
	}
	for _, m := range margins {
		res.note("lost lease: the command's last process was gone %s before its lease expired, and %s before the rescue", millis(m.left), millis(m.rescuedAt.Sub(m.end)))
	}
	_ = victim.signal(syscall.SIGTERM)
	_ = worker.signal(syscall.SIGTERM)
	_ = rescuer.signal(syscall.SIGTERM)
	for _, w := range []*workerProc{victim, worker, rescuer} {
		select {
		case <-w.exited:
		case <-time.After(30 * time.Second):
			res.check(false, "worker %d did not exit within 30s of SIGTERM", w.n)
		}
	}
	if !res.OK() {
		res.note("worker 0 output: %s", worker.logTail())
	}
	return res, nil
}
