package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// FrozenWorker stops `fila work` processes with SIGSTOP (as a frozen VM or
// container, or a debugger, would) at random points while their command
// runs, from 50 ms after the claim to past the first heartbeats; each
// command would run for four leases. Another worker rescues each job once
// its lease expires and runs it (for a second). The frozen worker's command
// must be dead before the rescue — killed at the attempt's deadline by
// something that runs on while the worker is frozen — so no two runs
// overlap. Then SIGCONT: the frozen worker finds its attempt gone, its
// stale result is fenced or discarded, and the job stays completed once,
// by its new owner. (The stall scenario freezes a worker whose command
// ends before the lease.)
func FrozenWorker(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		lease = partitionLease
		first = 4 * lease
		again = time.Second
	)
	n := rounds(size)
	offsets := spread(n, 50*time.Millisecond, lease+lease/3)
	res := &Result{Load: fmt.Sprintf("%d frozen processes, lease %s", n, lease)}
	dir, cleanup, err := scenarioDir("frozen")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "frozen")
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
	command := sleepingCommand(runFile, filepath.Join(dir, "first"), first.Seconds(), again.Seconds())

	type round struct {
		kind      string
		offset    time.Duration
		proc      *workerProc
		job       int64
		claimedAt time.Time
		stoppedAt time.Time
		err       error
	}
	rs := make([]*round, n)
	defer func() {
		for _, r := range rs {
			if r != nil && r.proc != nil {
				r.proc.kill()
			}
		}
	}()
	var execArgs []string
	for i := range rs {
		r := &round{kind: fmt.Sprintf("f%d", i), offset: offsets[i]}
		rs[i] = r
		execArgs = append(execArgs, "--exec", r.kind+"="+command)
		if r.proc, err = env.startWorker(db, dir, i, "--concurrency", "1", "--lease", lease.String(),
			"--shutdown-timeout", "5s", "--exec", r.kind+"="+command); err != nil {
			return nil, err
		}
	}
	if err := env.waitListening(ctx, db, n); err != nil {
		return nil, err
	}
	env.progress("freezing %d workers at %s after their claims", n, describeOffsets(offsets))
	var claimed, frozen sync.WaitGroup
	for _, r := range rs {
		claimed.Add(1)
		frozen.Add(1)
		go func() {
			defer frozen.Done()
			if sleepUntil(ctx, time.Now().Add(time.Duration(rand.Int64N(int64(lease/3))))) != nil {
				claimed.Done()
				return
			}
			if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind) VALUES ($1::text) RETURNING id`, r.kind).Scan(&r.job); err != nil {
				r.err = err
				claimed.Done()
				return
			}
			at, ok := waitRunning(ctx, db, clk, r.job, 30*time.Second)
			claimed.Done()
			if !ok {
				r.err = fmt.Errorf("job %d (%s) was not claimed within 30s", r.job, r.kind)
				return
			}
			r.claimedAt = at
			// Frozen while its command runs: on a loaded machine the command
			// may start later than the offset after the claim, and a worker
			// frozen before it hands the command over has nothing running
			// to prove anything about.
			if !waitFor(ctx, 30*time.Second, func() bool { return commandStarted(watch, r.job) }) {
				r.err = fmt.Errorf("job %d (%s): its command did not start within 30s of the claim", r.job, r.kind)
				return
			}
			if sleepUntil(ctx, at.Add(r.offset)) != nil {
				return
			}
			if err := r.proc.signal(syscall.SIGSTOP); err != nil {
				r.err = err
				return
			}
			r.stoppedAt = wall(time.Now())
		}()
	}
	claimed.Wait()
	for _, r := range rs {
		if r.err != nil {
			return nil, r.err
		}
	}
	rescuer, err := env.startWorker(db, dir, 99, append([]string{"--concurrency", fmt.Sprint(n), "--lease", lease.String()}, execArgs...)...)
	if err != nil {
		return nil, err
	}
	defer rescuer.kill()
	frozen.Wait()
	for _, r := range rs {
		if r.err != nil {
			return nil, r.err
		}
	}
	completed := waitFor(ctx, 30*time.Second+2*lease, func() bool {
		var left int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state <> 'completed'`).Scan(&left)
		return left == 0
	})
	res.check(completed, "jobs were not completed by the rescuer within %s", 30*time.Second+2*lease)
	before := map[int64]jobFinal{}
	for _, r := range rs {
		if before[r.job], err = readJob(ctx, db, r.job); err != nil {
			return nil, err
		}
	}
	// Thawed, each frozen worker finds out within two heartbeats that its
	// attempt is gone; then it stops.
	env.progress("resuming the frozen workers")
	for _, r := range rs {
		_ = r.proc.signal(syscall.SIGCONT)
	}
	if err := sleepUntil(ctx, time.Now().Add(2*lease/3+200*time.Millisecond)); err != nil {
		return nil, err
	}
	for _, r := range rs {
		_ = r.proc.signal(syscall.SIGTERM)
	}
	for _, r := range rs {
		select {
		case <-r.proc.exited:
			res.check(r.proc.err == nil, "frozen worker %d exited with %v after SIGCONT and SIGTERM", r.proc.n, r.proc.err)
		case <-time.After(30 * time.Second):
			res.check(false, "frozen worker %d did not exit within 30s of SIGTERM", r.proc.n)
		}
	}
	_ = rescuer.signal(syscall.SIGTERM)
	<-rescuer.exited

	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	exps, err := leaseExpiries(ctx, db, clk)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	margins := rescueMargins(runs, exps, now)
	res.recordMargins(margins)
	ov := res.overlapping(runs, now)
	res.check(len(ov) == 0, "jobs ran on two workers at once (worst overlap %s): %s", millis(res.WorstOverlap), ids(ov, 10))
	res.Duplicated = len(okTwice(runs))
	res.check(res.Duplicated == 0, "jobs whose command ran to its end twice: %s", ids(okTwice(runs), 10))
	marginOf := map[int64]margin{}
	for _, m := range margins {
		if _, ok := marginOf[m.job]; !ok {
			marginOf[m.job] = m
		}
	}
	var fenced int
	for i, r := range rs {
		what := fmt.Sprintf("job %d (worker frozen %s after its claim)", r.job, r.stoppedAt.Sub(r.claimedAt).Round(time.Millisecond))
		after, err := readJob(ctx, db, r.job)
		if err != nil {
			return nil, err
		}
		if after.state != runtime.StateCompleted {
			res.Lost++
			res.check(false, "%s ended %s: %s", what, after.state, firstLine(after.lastError))
			continue
		}
		b := before[r.job]
		res.check(after.attempts == b.attempts && after.finishedAt.Equal(b.finishedAt),
			"%s: after SIGCONT the job went from attempt %d finished %s to attempt %d finished %s: the stale attempt overwrote the new owner's result",
			what, b.attempts, b.finishedAt, after.attempts, after.finishedAt)
		if containsAny(r.proc.log(), "result rejected", "lease lost", "discarded") {
			fenced++
		}
		var victim, others int
		for _, x := range runsOf(runs, r.job) {
			if x.worker == i {
				victim++
			} else {
				others++
				res.check(x.ok, "%s: the rescued run did not complete", what)
			}
		}
		res.check(victim == 1 && others == 1, "%s: %d runs on the frozen worker and %d on the rescuer, want one each", what, victim, others)
		m, ok := marginOf[r.job]
		if !ok {
			res.check(false, "%s: no lease expiry with a run in its error history", what)
			continue
		}
		res.check(m.beforeRescue, "%s: the frozen worker's command was still alive when the job was rescued (%s past its lease)", what, millis(-m.left))
		res.Recovery = max(res.Recovery, m.rescuedAt.Sub(r.stoppedAt))
	}
	var at []time.Duration
	for _, r := range rs {
		at = append(at, r.stoppedAt.Sub(r.claimedAt))
	}
	res.note("%d `fila work` processes SIGSTOPped at %s after their claims, each while its command (%s) ran: worst overlap %s; margin left before the lease expired when the frozen worker's command ended: %s; rescued at most %s after the freeze",
		n, describeOffsets(at), first, millis(res.WorstOverlap), describeMargins(margins), res.Recovery.Round(time.Millisecond))
	res.note("after SIGCONT each job stayed completed once, by its new owner; %d of %d frozen workers logged their stale result rejected or discarded", fenced, n)
	if !res.OK() {
		var b strings.Builder
		for _, r := range rs {
			if r.proc != nil {
				fmt.Fprintf(&b, "worker %d: %s", r.proc.n, r.proc.logTail())
				break
			}
		}
		res.note("frozen worker output: %s", b.String())
	}
	return res, nil
}

// commandStarted reports whether a run of job has started, as its command
// recorded in the watched runs file.
func commandStarted(w *runWatch, job int64) bool {
	runs, err := w.runs()
	if err != nil {
		return false
	}
	for _, r := range runs {
		if r.job == job {
			return true
		}
	}
	return false
}
