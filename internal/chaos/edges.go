package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// MixedKinds runs two `fila work` processes on one queue, each handling a
// kind the other does not, and enqueues jobs of both kinds with a single
// attempt each. A claim takes only the kinds its worker handles: every job
// runs exactly once, on the worker of its kind, and none is failed by a
// worker that cannot run it.
func MixedKinds(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	perKind := max(20, processLoad(size)/2)
	res := &Result{Load: fmt.Sprintf("%d + %d jobs of 2 kinds, 1 attempt each, 2 processes", perKind, perKind)}
	dir, cleanup, err := scenarioDir("mixed")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "mixed")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	var procs []*workerProc
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for n, kind := range []string{"ka", "kb"} {
		p, err := env.startWorker(db, dir, n, "--concurrency", "4", "--exec", kind+"="+recordingCommand(runFile, 0.05))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	if err := env.waitListening(ctx, db, len(procs)); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, max_attempts)
		SELECT CASE WHEN i % 2 = 0 THEN 'ka' ELSE 'kb' END, 1 FROM generate_series(1, $1::int) AS i`, 2*perKind); err != nil {
		return nil, err
	}
	settled := waitFor(ctx, 60*time.Second, func() bool {
		c, err := countJobs(ctx, db.pool, false)
		return err == nil && c.pending+c.running == 0
	})
	res.check(settled, "jobs still pending or running after 60s")
	var kindOf = map[int64]string{}
	rows, err := db.pool.Query(ctx, `SELECT id, kind, state, coalesce(last_error, '') FROM fila_jobs`)
	if err != nil {
		return nil, err
	}
	var dead int
	for rows.Next() {
		var id int64
		var kind, state, lastErr string
		if err := rows.Scan(&id, &kind, &state, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		kindOf[id] = kind
		if state != runtime.StateCompleted {
			res.Lost++
			if state == runtime.StateDead {
				dead++
			}
			res.check(false, "job %d (%s) ended %s: %s", id, kind, state, firstLine(lastErr))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	perJob := map[int64]int{}
	for _, r := range runs {
		perJob[r.job]++
		want := map[string]int{"ka": 0, "kb": 1}[kindOf[r.job]]
		res.check(r.worker == want, "job %d of kind %s ran on worker %d, which does not handle it", r.job, kindOf[r.job], r.worker)
	}
	for id := range kindOf {
		res.check(perJob[id] == 1, "job %d ran %d times", id, perJob[id])
	}
	res.Duplicated = len(okTwice(runs))
	res.overlapping(runs, time.Now())
	res.note("%d jobs of kind ka and %d of kind kb on one queue, two workers each handling one kind: every job ran once, on its kind's worker; %d ended dead",
		perKind, perKind, dead)
	return res, nil
}

// ScheduledOnTime enqueues jobs due a few seconds ahead while two `fila
// work` processes sit idle with the default 30 s safety poll, in every way
// a job can come due: `fila enqueue --run-at`, a plain SQL INSERT, and an
// UPDATE setting a dead job back to pending later. Each must start at its
// run_at (on the database clock) within a fraction of a second, not at the
// next safety poll; the worst lateness is the recovery figure.
func ScheduledOnTime(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const perWay = 4
	res := &Result{Load: fmt.Sprintf("%d jobs due 1–4 s ahead, 2 idle processes", 3*perWay)}
	dir, cleanup, err := scenarioDir("scheduled")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "scheduled")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	var procs []*workerProc
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for n := 0; n < 2; n++ {
		p, err := env.startWorker(db, dir, n, "--exec", "later=true")
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	if err := env.waitListening(ctx, db, len(procs)); err != nil {
		return nil, err
	}
	for i := 1; i <= perWay; i++ {
		if _, err := env.fila(ctx, db, "enqueue", "--kind", "later", "--run-at", fmt.Sprintf("+%ds", i)); err != nil {
			return nil, err
		}
		if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + make_interval(secs => $1::float8))`, i); err != nil {
			return nil, err
		}
		var dead int64
		if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at)
			VALUES ('later', 'dead', 1, 1, now()) RETURNING id`).Scan(&dead); err != nil {
			return nil, err
		}
		if _, err := db.pool.Exec(ctx, `UPDATE fila_jobs SET state = 'pending', attempts = 0, finished_at = NULL,
				run_at = now() + make_interval(secs => $1::float8) WHERE id = $2::bigint`, i, dead); err != nil {
			return nil, err
		}
	}
	done := waitFor(ctx, 60*time.Second, func() bool {
		var left int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state <> 'completed'`).Scan(&left)
		return left == 0
	})
	res.check(done, "scheduled jobs not completed within 60s")
	var n int
	var worst, median float64
	if err := db.pool.QueryRow(ctx, `SELECT count(*),
			coalesce(max(extract(epoch FROM started_at - run_at)), 0)::float8,
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)), 0)::float8
		FROM fila_jobs WHERE state = 'completed'`).Scan(&n, &worst, &median); err != nil {
		return nil, err
	}
	var early int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE started_at < run_at`).Scan(&early); err != nil {
		return nil, err
	}
	res.Lost = 3*perWay - n
	res.Duplicated, res.Overlapping = 0, 0
	lateness := time.Duration(worst * float64(time.Second))
	res.Recovery = lateness
	res.check(early == 0, "%d jobs started before their run_at", early)
	res.check(lateness < time.Second, "a scheduled job started %s after its run_at (the safety poll is 30 s)", lateness.Round(time.Millisecond))
	res.note("%d scheduled jobs (by fila enqueue --run-at, plain SQL INSERT, UPDATE back to pending) started after their run_at by %.1f ms at the median and %.1f ms at worst, on the database clock, while both workers were idle",
		n, median*1000, worst*1000)
	return res, nil
}

// DeafHandler runs `fila work` processes whose command ignores SIGTERM and
// would run for two minutes, and stops one of them hard (two SIGTERMs)
// while it runs them. The worker kills its commands' process groups, gives
// their jobs back at once, and exits; the other worker runs them. Nothing
// is lost, and no job runs on two workers at once: the deaf command is dead
// before its job is given back.
func DeafHandler(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const jobs = 8
	res := &Result{Load: fmt.Sprintf("%d jobs deaf to SIGTERM, 2 processes", jobs)}
	dir, cleanup, err := scenarioDir("deaf")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "deaf")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	stamp := func(what string) string { return stampLine(runFile, what, "") }
	// The first run of each job ignores SIGTERM and would last two minutes;
	// later runs finish at once. (The interrupted attempt is not counted, so
	// the attempt number cannot tell them apart: a directory made per job
	// does.) The directory is made before the run is recorded as started,
	// so a run killed just after it was seen starting still counts as the
	// first.
	firstRuns := filepath.Join(dir, "first")
	deaf := fmt.Sprintf(`trap '' TERM; mkdir -p %s; if mkdir %s/$FILA_JOB_ID 2>/dev/null; then %s; sleep 120; else %s; fi; %s`,
		firstRuns, firstRuns, stamp("start"), stamp("start"), stamp("end"))
	victim, err := env.startWorker(db, dir, 0, "--concurrency", fmt.Sprint(jobs), "--shutdown-timeout", "1m", "--exec", "deaf="+deaf)
	if err != nil {
		return nil, err
	}
	defer victim.kill()
	if err := env.waitListening(ctx, db, 1); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'deaf' FROM generate_series(1, $1::int)`, jobs); err != nil {
		return nil, err
	}
	if !waitFor(ctx, 30*time.Second, func() bool {
		runs, _ := watch.runs()
		return len(runs) == jobs
	}) {
		return nil, fmt.Errorf("the %d deaf commands did not all start within 30s", jobs)
	}
	env.progress("two SIGTERMs to worker %d, whose %d commands ignore SIGTERM", victim.n, jobs)
	if err := victim.signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond) // the second signal is the hard stop
	if err := victim.signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	hardAt := time.Now()
	select {
	case <-victim.exited:
	case <-time.After(30 * time.Second):
		res.check(false, "the worker did not exit within 30s of the hard stop")
		victim.kill()
	}
	exitedAt := time.Now()
	after, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	var back int
	for _, s := range after {
		if s.state == runtime.StatePending && s.attempts == 0 {
			back++
		}
	}
	res.check(back == jobs, "%d of %d jobs went back to pending uncounted at the hard stop", back, jobs)
	// Another worker runs them.
	rescuer, err := env.startWorker(db, dir, 1, "--concurrency", fmt.Sprint(jobs), "--exec", "deaf="+deaf)
	if err != nil {
		return nil, err
	}
	defer rescuer.kill()
	done := waitFor(ctx, 60*time.Second, func() bool {
		var left int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state <> 'completed'`).Scan(&left)
		return left == 0
	})
	final, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	for id, s := range final {
		if s.state != runtime.StateCompleted {
			res.Lost++
			res.check(false, "job %d ended %s", id, s.state)
		}
	}
	res.check(done, "jobs not completed within 60s after the hard stop")
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.worker == victim.n && r.ok {
			res.check(false, "a deaf command of the stopped worker ran to its end (job %d)", r.job)
		}
	}
	// Every deaf command ended, killed, by the time its worker exited.
	res.check(len(res.overlapping(runs, exitedAt)) == 0, "jobs ran twice at once: %v", overlaps(runs, exitedAt))
	res.Duplicated = len(okTwice(runs))
	res.Recovery = exitedAt.Sub(hardAt)
	res.note("a hard stop of a worker whose %d commands ignore SIGTERM: it killed their process groups, gave the jobs back uncounted and exited %s after the second signal; another worker ran each once",
		jobs, res.Recovery.Round(time.Millisecond))
	if !res.OK() {
		res.note("stopped worker's output: %s", victim.logTail())
	}
	return res, nil
}
