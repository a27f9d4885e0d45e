package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// processLoad is how many jobs the process scenarios run: a small share of
// Size.Jobs, since each job starts a few shell processes.
func processLoad(size Size) int { return max(60, min(400, size.Jobs/100)) }

// KillWorker drains jobs with three `fila work` processes (each job a
// shell command that records its start and end) and kills one of them with
// SIGKILL while it runs jobs. The jobs it held run again once their lease
// (2s) has passed, each exactly once more, on another worker; every other
// job runs exactly once; and the killed worker's commands die with it.
func KillWorker(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		workers = 3
		lease   = 2 * time.Second
	)
	jobs := processLoad(size)
	res := &Result{Load: fmt.Sprintf("%d jobs, %d processes × 4", jobs, workers)}
	dir, cleanup, err := scenarioDir("kill")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "kill")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	procs := make([]*workerProc, workers)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	for i := range procs {
		if procs[i], err = env.startWorker(db, dir, i, "--concurrency", "4", "--lease", lease.String(),
			"--exec", "job="+recordingCommand(runFile, 0.2)); err != nil {
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
	// Kill it once a third of the jobs ran and it has a command running.
	var holding int
	if !waitFor(ctx, 60*time.Second, func() bool {
		runs, _ := watch.runs()
		ended, open := 0, 0
		for _, r := range runs {
			if r.ok {
				ended++
			} else if r.worker == victim.n {
				open++
			}
		}
		holding = open
		return ended >= jobs/3 && open > 0
	}) {
		return nil, fmt.Errorf("a third of the jobs did not run within 60s with the victim busy")
	}
	env.progress("killing worker %d (pid %d) while it runs %d jobs", victim.n, victim.pid(), holding)
	if err := victim.signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	killedAt := time.Now()
	<-victim.exited
	// A statement the victim sent just before it died still runs to its
	// end in its backend, which notices the closed socket only when it
	// replies: a claim in flight commits after the kill. Read the states
	// once such statements are done, well inside the lease, so none of the
	// victim's jobs can have been rescued yet.
	select {
	case <-time.After(lease / 4):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	atKill, err := jobStates(ctx, db)
	if err != nil {
		return nil, err
	}
	// The jobs running at the kill: the victim's, and the others' (which
	// must not be touched).
	runningAtKill := map[int64]bool{}
	for id, st := range atKill {
		if st.state == runtime.StateRunning {
			runningAtKill[id] = true
		}
	}
	allDone := waitFor(ctx, 60*time.Second+3*lease, func() bool {
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
	// When the last of the killed worker's jobs was rescued (its lease
	// found expired: run_at is set to the rescue), started again and
	// completed, as ages on the database clock turned into local times.
	var rescuedAge, startedAge, finishedAge float64
	if err := db.pool.QueryRow(ctx, `SELECT
		coalesce(extract(epoch FROM now() - max(run_at)), 0)::float8,
		coalesce(extract(epoch FROM now() - max(started_at)), 0)::float8,
		coalesce(extract(epoch FROM now() - max(finished_at)), 0)::float8
		FROM fila_jobs WHERE last_error LIKE '%lease expired%'`).Scan(&rescuedAge, &startedAge, &finishedAge); err != nil {
		return nil, err
	}
	now := time.Now()
	at := func(age float64) time.Duration {
		return now.Add(-time.Duration(age * float64(time.Second))).Sub(killedAt)
	}
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
	// Runs per job and attempt; the victim's unfinished runs ended with it.
	byJob := map[int64][]run{}
	for _, r := range runs {
		byJob[r.job] = append(byJob[r.job], r)
	}
	var untouched, again, unstarted, givenBack, effectTwice, lapsed int
	var twice, lapsedIDs []int64
	for id, s := range final {
		rs := byJob[id]
		if !containsAny(s.lastError, "lease expired") {
			if s.attempts == 1 && len(rs) == 1 && rs[0].ok {
				untouched++
			} else {
				res.check(false, "job %d was never rescued but ended at attempt %d with %d runs", id, s.attempts, len(rs))
			}
			continue
		}
		var victims, others []run
		for _, r := range rs {
			if r.worker == victim.n {
				victims = append(victims, r)
			} else {
				others = append(others, r)
			}
		}
		// A lease can also lapse without the kill: on a loaded machine a
		// worker whose renewals do not return in time stops the handler
		// and another one rescues the job, as it must. Such a job was not
		// running at the kill, or ran more than once on the live workers;
		// the overlap check below still covers every one of its runs.
		if !runningAtKill[id] || len(others) > 1 {
			lapsed++
			lapsedIDs = append(lapsedIDs, id)
			res.check(len(rs) > 0 && rs[len(rs)-1].ok && s.attempts >= 2,
				"job %d, rescued after a lease lapse, ended at attempt %d with %d runs, the last not a success", id, s.attempts, len(rs))
			continue
		}
		// Rescued for the kill: it was the victim's, running at the kill,
		// and ran exactly once more. Its attempt counts if the victim had
		// heartbeated it; killed before that, it was given back.
		again++
		want := 2
		if containsAny(s.lastError, "not counted as an attempt") {
			want = 1
			givenBack++
		}
		res.check(s.attempts == want, "job %d held by the killed worker ended at attempt %d, want %d (last error: %s)", id, s.attempts, want, s.lastError)
		// Not back in the queue before the lease the killed worker held ran
		// out, and that lease a full one from its last renewal. Both are
		// judged on the database clock, the one that decides a rescue (a
		// lease is expired once lease_until < now(), and the rescue sets
		// run_at to its now()), so no allowance for the test's own
		// scheduling delays is needed and none hides an early rescue:
		// unlike a bound measured locally from the kill, which has to assume
		// the last heartbeat came on time (one a loaded machine delays ends
		// the lease sooner, rightly) and that the kill was seen at once.
		k := atKill[id]
		if k.leaseUntil == nil || k.renewed == nil {
			res.check(false, "job %d running at the kill had no lease or renewal time", id)
		} else {
			res.check(s.runAt.After(*k.leaseUntil), "job %d held by the killed worker was rescued at %s, before its lease ran out at %s",
				id, s.runAt.Format(time.RFC3339Nano), k.leaseUntil.Format(time.RFC3339Nano))
			res.check(k.leaseUntil.Sub(*k.renewed) >= lease, "job %d held by the killed worker had a lease of %s from its last renewal, want %s",
				id, k.leaseUntil.Sub(*k.renewed), lease)
		}
		res.check(len(victims) <= 1 && len(others) == 1 && others[0].ok,
			"job %d: runs by the killed worker: %d, by the others: %d", id, len(victims), len(others))
		if len(victims) == 0 {
			unstarted++ // claimed by the victim, killed before its command started
		} else if victims[0].ok {
			// Its command had finished before the kill, but the outcome
			// was not written yet: at-least-once delivery runs it again.
			effectTwice++
			twice = append(twice, id)
		}
	}
	res.check(again > 0, "no job held by the killed worker ran again")
	var rescued, started, completed time.Duration
	if again > 0 {
		rescued, started, completed = at(rescuedAge), at(startedAge), at(finishedAge)
		res.Recovery = rescued
	}
	sort.Slice(twice, func(i, j int) bool { return twice[i] < twice[j] })
	res.Duplicated = effectTwice
	margins, err := res.measureMargins(ctx, db, runs)
	if err != nil {
		return nil, err
	}
	// The killed worker's commands must die before their leases end, when
	// another worker may start the job again: judged against each lease,
	// not against a fixed time after the kill, which a loaded machine's
	// scheduling delays can exceed without any overlap.
	for _, m := range margins {
		if m.worker == victim.n {
			res.check(m.left > 0 && m.beforeRescue, "a command of the killed worker ran on past its lease (job %d ended %s after the kill, %s before its lease expired)",
				m.job, m.end.Sub(killedAt).Round(time.Millisecond), m.left.Round(time.Millisecond))
		}
	}
	res.check(len(res.overlapping(runs, killedAt)) == 0, "jobs run twice at once: %v", overlaps(runs, killedAt))
	res.note("killed worker held %d jobs (%d of them claimed but not started yet; %d killed before their first heartbeat, whose attempts the rescue gave back); "+
		"after the kill, the last was back in the queue at %s (its %s lease expired), "+
		"running again on another worker at %s (a rescued job queues behind the jobs already waiting), completed at %s; each ran exactly once more",
		again, unstarted, givenBack, rescued.Round(time.Millisecond), lease, started.Round(time.Millisecond), completed.Round(time.Millisecond))
	res.note("the %d other jobs ran exactly once each, untouched", untouched)
	if lapsed > 0 {
		sort.Slice(lapsedIDs, func(i, j int) bool { return lapsedIDs[i] < lapsedIDs[j] })
		res.note("%d jobs were rescued after a lease lapsed apart from the kill (renewals too slow on a loaded machine; each handler stopped before its lease ended): %v", lapsed, lapsedIDs)
	}
	if len(margins) > 0 {
		res.note("the killed worker's commands died with it: margin left before their leases expired %s", describeMargins(margins))
	}
	if effectTwice > 0 {
		res.note("%d of the held jobs had finished their command just before the kill, with the completion not yet written: "+
			"they ran again (at-least-once delivery; make such effects idempotent with the job's idempotency key): %v", effectTwice, twice)
	}
	if !res.OK() {
		res.note("killed worker's output: %s", victim.logTail())
	}
	return res, nil
}
