package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// guardKills is how many exec guards KillGuard kills, one after another.
const guardKills = 3

// KillGuard drains jobs with two `fila work --exec` processes (each
// command records its start, starts a long child it reports and leaves
// behind, and exits a second later)
// and SIGKILLs, three times, the exec guard of a command that is running
// — the guard, not the worker. Each time the command dies with its guard
// (its parent-death signal), the command's child too (reparented to the
// worker, which kills what a killed guard leaves), the attempt fails
// saying its guard died, and the job runs again once, never while the
// killed run still lives. The worker goes on with a new guard; every other
// job runs exactly once.
func KillGuard(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		workers = 2
		lease   = 5 * time.Second
		command = 1.0 // seconds each command runs
	)
	jobs := processLoad(size) / 2
	res := &Result{Load: fmt.Sprintf("%d jobs of %gs, %d processes × 4, %d guards killed", jobs, command, workers, guardKills)}
	dir, cleanup, err := scenarioDir("killguard")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "killguard")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	defer watch.killAlive()
	procs := make([]*workerProc, workers)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	// Each command leaves a long child behind it: its guard kills it when
	// the command exits; with the guard killed, only the worker can.
	cmd := fmt.Sprintf("%s; sleep 60 & p=$!; %s; sleep %g; %s", stampLine(runFile, "start", ""),
		stampLine(runFile, "pid", "$p"), command, stampLine(runFile, "end", ""))
	for i := range procs {
		// A short backoff, so that a killed attempt runs again at once.
		if procs[i], err = env.startWorker(db, dir, i, "--concurrency", "4", "--lease", lease.String(),
			"--retry-base", "100ms", "--retry-max", "200ms",
			"--exec", "job="+cmd); err != nil {
			return nil, err
		}
	}
	if err := env.waitListening(ctx, db, workers); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'job' FROM generate_series(1, $1::int)`, jobs); err != nil {
		return nil, err
	}
	victim := procs[0]
	type kill struct {
		job   int64
		guard int
		at    time.Time
	}
	var kills []kill
	done := map[int64]bool{} // the jobs whose guard was killed
	for len(kills) < guardKills {
		var target run
		var guard int
		if !waitFor(ctx, 60*time.Second, func() bool {
			runs, _ := watch.runs()
			for _, r := range runs {
				if r.worker != victim.n || !r.end.IsZero() || r.pid == 0 || r.attempt != 1 || len(r.procs) < 2 || done[r.job] {
					continue // not the victim's, over, or its child not reported yet
				}
				if g, ok := parentPid(r.pid); ok {
					if w, ok := parentPid(g); ok && w == victim.pid() {
						target, guard = r, g
						return true
					}
				}
			}
			return false
		}) {
			return nil, fmt.Errorf("no command of worker %d running with its child within 60s (%d guards killed)", victim.n, len(kills))
		}
		env.progress("killing the exec guard (pid %d) of job %d's command (pid %d) on worker %d", guard, target.job, target.pid, victim.n)
		if err := syscall.Kill(guard, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("kill guard %d: %w", guard, err)
		}
		kills = append(kills, kill{job: target.job, guard: guard, at: wall(time.Now())})
		done[target.job] = true
		// One at a time: the next guard once this run is over.
		if !waitFor(ctx, lease, func() bool {
			runs, _ := watch.runs()
			for _, r := range runs {
				if r.job == target.job && r.attempt == 1 && r.end.IsZero() {
					return false
				}
			}
			return true
		}) {
			res.check(false, "job %d's command or its child still ran %s after its guard was killed", target.job, lease)
			break
		}
	}

	allDone := waitFor(ctx, 60*time.Second+2*lease, func() bool {
		st, err := jobStates(ctx, db)
		if err != nil {
			return false
		}
		for _, s := range st {
			if s.state != runtime.StateCompleted {
				return false
			}
		}
		return true
	})
	final, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	for _, s := range final {
		if s.state != runtime.StateCompleted {
			res.Lost++
		}
	}
	res.check(allDone && res.Lost == 0, "%d jobs did not complete", res.Lost)
	byJob := map[int64][]run{}
	for _, r := range runs {
		byJob[r.job] = append(byJob[r.job], r)
	}
	killed := map[int64]kill{}
	var deaths []time.Duration
	for _, k := range kills {
		killed[k.job] = k
		rs := byJob[k.job]
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		s := final[k.job]
		res.check(s.attempts == 2 && len(rs) == 2 && !rs[0].ok && rs[1].ok,
			"job %d, whose guard was killed, ended at attempt %d with %d runs (want 2: the killed one, then a success)", k.job, s.attempts, len(rs))
		if len(rs) == 0 {
			continue
		}
		first := rs[0]
		for _, p := range first.procs {
			res.check(!p.alive, "job %d: process %d of the command whose guard was killed is still alive", k.job, p.pid)
		}
		if !first.end.IsZero() {
			deaths = append(deaths, first.end.Sub(k.at))
		}
	}
	for id, s := range final {
		if _, ok := killed[id]; ok {
			continue
		}
		rs := byJob[id]
		res.check(s.attempts == 1 && len(rs) == 1 && rs[0].ok, "job %d, untouched, ended at attempt %d with %d runs", id, s.attempts, len(rs))
	}
	// The killed attempts' errors say what happened.
	var said int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE id = ANY($1) AND errors::text LIKE '%exec guard%'`,
		jobIDs(kills, func(k kill) int64 { return k.job })).Scan(&said); err != nil {
		return nil, err
	}
	res.check(said == len(kills), "%d of the %d killed attempts have an error naming the exec guard", said, len(kills))
	res.check(len(res.overlapping(runs, time.Now())) == 0, "jobs run twice at once: %v", overlaps(runs, time.Now()))
	res.check(victim.running(), "the worker whose guards were killed exited: %s", victim.logTail())
	sort.Slice(deaths, func(i, j int) bool { return deaths[i] < deaths[j] })
	if len(deaths) > 0 {
		res.note("%d guards SIGKILLed while their commands ran: each command and its child were dead %s to %s after the kill, its attempt failed naming the guard, and it ran once more; worker %d went on with new guards",
			len(kills), millis(deaths[0]), millis(deaths[len(deaths)-1]), victim.n)
	}
	res.note("the %d other jobs ran exactly once each", len(final)-len(kills))
	if !res.OK() {
		res.note("worker's output: %s", victim.logTail())
	}
	return res, nil
}

// parentPid reads a process's parent from /proc.
func parentPid(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	p, err := strconv.Atoi(f[1])
	return p, err == nil
}

func jobIDs[T any](xs []T, id func(T) int64) []int64 {
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}
