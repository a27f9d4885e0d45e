package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// PartitionFreeze cuts a worker off from the database while its job runs:
// nothing goes between it and PostgreSQL (main and listen DSN) either way,
// sockets open, as when a network path goes silent; when it heals, what
// was held is delivered late. See partition.
func PartitionFreeze(ctx context.Context, env *Env, size Size) (*Result, error) {
	return partition(ctx, env, size, "partition-freeze", freeze)
}

// PartitionReset cuts a worker off with TCP resets: its connections are
// torn down and new ones refused with a reset. See partition.
func PartitionReset(ctx context.Context, env *Env, size Size) (*Result, error) {
	return partition(ctx, env, size, "partition-reset", reset)
}

// partitionLease is the lease of the partition and frozen-worker
// scenarios: heartbeats every second, and a worker gives up its attempt
// half a second (Lease/6) before the lease it last saw granted runs out.
const partitionLease = 3 * time.Second

// partition runs the cut at random points of the first heartbeat interval
// after a claim (from 50 ms to Lease/3), where a worker has not yet renewed
// the lease it claimed, and once in steady state (after the third
// heartbeat), each with an --exec command (a `fila work` process per cut)
// and with an in-process Go handler that honours its context (a runtime
// per cut). Each job's first run would last four leases; another worker,
// connected directly, rescues it once its lease expires and runs it (for
// a second). What must hold: the cut worker's run is over before the
// rescue (no overlap), the rescued run completes the job, and once the
// traffic flows again and the cut worker stops, the job stays completed by
// its new owner: the stale attempt's result is fenced or discarded.
func partition(ctx context.Context, env *Env, size Size, name string, mode proxyMode) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		lease = partitionLease
		first = 4 * lease   // the cut run would last this long
		again = time.Second // the rescued run
	)
	n := rounds(size)
	offsets := append(spread(n, 50*time.Millisecond, lease/3), lease+lease/6+time.Duration(rand.Int64N(int64(lease/6))))
	res := &Result{Load: fmt.Sprintf("%d cuts × (--exec, Go handler), lease %s", len(offsets), lease)}
	dir, cleanup, err := scenarioDir(name)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, name)
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
	log := newRunLog()
	var firsts sync.Map
	goHandler := func(worker int) runtime.Handler {
		return func(ctx context.Context, j *runtime.Job) error {
			d := first
			if _, seen := firsts.LoadOrStore(j.ID, true); seen {
				d = again
			}
			i := log.begin(j.ID, j.Attempt, worker)
			select {
			case <-time.After(d):
				log.end(i, true)
				return nil
			case <-ctx.Done():
				log.end(i, false)
				return context.Cause(ctx)
			}
		}
	}
	command := sleepingCommand(runFile, filepath.Join(dir, "first"), first.Seconds(), again.Seconds())

	type round struct {
		exec      bool
		kind      string
		worker    int
		offset    time.Duration
		cut       *cut
		proc      *workerProc
		rt        *liveRuntime
		job       int64
		claimedAt time.Time
		cutAt     time.Time
		err       error
	}
	var rs []*round
	defer func() {
		for _, r := range rs {
			if r.cut != nil {
				r.cut.set(forward)
			}
			if r.proc != nil {
				r.proc.kill()
			}
			if r.rt != nil {
				_ = r.rt.stop(10 * time.Second)
			}
			if r.cut != nil {
				r.cut.close()
			}
		}
	}()
	var goKinds []runtime.Kind
	var execArgs []string
	execs := 0
	for i, off := range offsets {
		for _, exec := range []bool{true, false} {
			r := &round{exec: exec, offset: off, kind: fmt.Sprintf("x%d", i), worker: i}
			if !exec {
				r.kind, r.worker = fmt.Sprintf("g%d", i), 100+i
			}
			rs = append(rs, r)
			if r.cut, err = newCut(db); err != nil {
				return nil, err
			}
			if exec {
				execs++
				execArgs = append(execArgs, "--exec", r.kind+"="+command)
				if r.proc, err = env.startWorkerOn(r.cut.mainDSN, r.cut.listenDSN, dir, r.worker,
					"--concurrency", "1", "--lease", lease.String(), "--exec", r.kind+"="+command); err != nil {
					return nil, err
				}
				continue
			}
			goKinds = append(goKinds, runtime.Kind{Name: r.kind, Handler: goHandler(199)})
			if r.rt, err = startRuntime(ctx, runtime.Config{
				DSN: r.cut.mainDSN, ListenDSN: r.cut.listenDSN, Concurrency: 1, Lease: lease,
				Kinds:  []runtime.Kind{{Name: r.kind, Handler: goHandler(r.worker)}},
				Logger: env.logger().Named(r.kind),
			}); err != nil {
				return nil, err
			}
		}
	}
	if err := env.waitListening(ctx, db, len(rs)); err != nil {
		return nil, err
	}
	env.progress("cutting %d workers off at %s after their claims (and one each in steady state)", len(rs), describeOffsets(offsets[:n]))
	var claimed, cutDone sync.WaitGroup
	for _, r := range rs {
		claimed.Add(1)
		cutDone.Add(1)
		go func() {
			defer cutDone.Done()
			// Each job comes at its own moment of its worker's heartbeat
			// cycle, which runs on a ticker of its own.
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
			if sleepUntil(ctx, at.Add(r.offset)) != nil {
				return
			}
			r.cut.set(mode)
			r.cutAt = wall(time.Now())
		}()
	}
	claimed.Wait()
	for _, r := range rs {
		if r.err != nil {
			return nil, r.err
		}
	}
	// The rescuers, connected directly, start once every job is claimed.
	rescuer, err := env.startWorker(db, dir, 99, append([]string{"--concurrency", fmt.Sprint(execs), "--lease", lease.String()}, execArgs...)...)
	if err != nil {
		return nil, err
	}
	defer rescuer.kill()
	goRescuer, err := startRuntime(ctx, runtime.Config{
		DSN: db.dsn, ListenDSN: db.direct, Concurrency: len(goKinds), Lease: lease,
		Kinds: goKinds, Logger: env.logger().Named("rescuer"),
	})
	if err != nil {
		return nil, err
	}
	defer goRescuer.stop(10 * time.Second)
	cutDone.Wait()
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
	res.check(completed, "jobs were not completed by the rescuers within %s of the cuts", 30*time.Second+2*lease)
	before := map[int64]jobFinal{}
	for _, r := range rs {
		if before[r.job], err = readJob(ctx, db, r.job); err != nil {
			return nil, err
		}
	}
	// Traffic flows again; the cut workers find out their attempts are
	// gone, and stop.
	env.progress("traffic flows again; stopping the cut workers")
	for _, r := range rs {
		r.cut.set(forward)
	}
	var stopped sync.WaitGroup
	for _, r := range rs {
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			if r.proc != nil {
				_ = r.proc.signal(syscall.SIGTERM)
				select {
				case <-r.proc.exited:
				case <-time.After(30 * time.Second):
					res.check(false, "cut worker %d did not exit within 30s of SIGTERM", r.worker)
				}
				return
			}
			if err := r.rt.stop(30 * time.Second); err != nil {
				r.err = err
			}
		}()
	}
	stopped.Wait()
	_ = rescuer.signal(syscall.SIGTERM)
	_ = goRescuer.stop(10 * time.Second)
	<-rescuer.exited

	execRuns, err := watch.runs()
	if err != nil {
		return nil, err
	}
	runs := append(execRuns, log.snapshot()...)
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
	res.check(res.Duplicated == 0, "jobs whose run completed twice: %s", ids(okTwice(runs), 10))
	marginOf := map[int64]margin{}
	for _, m := range margins {
		if _, ok := marginOf[m.job]; !ok {
			marginOf[m.job] = m
		}
	}
	type figures struct {
		worst    time.Duration
		margins  []margin
		offsets  []time.Duration
		steady   []margin
		steadyAt time.Duration
		recovery time.Duration
	}
	fig := map[bool]*figures{true: {}, false: {}}
	for i, r := range rs {
		f := fig[r.exec]
		steady := i/2 == len(offsets)-1
		what := fmt.Sprintf("%s job %d (cut %s after its claim)", map[bool]string{true: "--exec", false: "Go"}[r.exec], r.job, r.cutAt.Sub(r.claimedAt).Round(time.Millisecond))
		if !steady {
			f.offsets = append(f.offsets, r.cutAt.Sub(r.claimedAt))
		}
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
			"%s: once the cut worker was back, the job went from attempt %d finished %s to attempt %d finished %s: the stale attempt overwrote the new owner's result",
			what, b.attempts, b.finishedAt, after.attempts, after.finishedAt)
		jr := runsOf(runs, r.job)
		_, w := overlapStats(jr, now)
		f.worst = max(f.worst, w)
		var victim, others int
		for _, x := range jr {
			if x.worker == r.worker {
				victim++
			} else {
				others++
				res.check(x.ok, "%s: the rescued run did not complete", what)
			}
		}
		res.check(victim == 1 && others == 1, "%s: %d runs on the cut worker and %d on the rescuer, want one each", what, victim, others)
		m, ok := marginOf[r.job]
		if !ok {
			res.check(false, "%s: no lease expiry with a run in its error history", what)
			continue
		}
		res.check(m.beforeRescue, "%s: the cut worker's run was still going when the job was rescued (margin %s)", what, millis(m.left))
		f.recovery = max(f.recovery, m.rescuedAt.Sub(r.cutAt))
		res.Recovery = max(res.Recovery, m.rescuedAt.Sub(r.cutAt))
		if steady {
			f.steady, f.steadyAt = append(f.steady, m), r.cutAt.Sub(r.claimedAt)
		} else {
			f.margins = append(f.margins, m)
		}
	}
	how := map[proxyMode]string{freeze: "nothing forwarded, sockets open", reset: "connections reset"}[mode]
	for _, exec := range []bool{true, false} {
		f := fig[exec]
		kind, each := "--exec commands", "a `fila work` per cut"
		if !exec {
			kind, each = "Go handlers honouring their context", "a runtime per cut"
		}
		res.note("%s (%s), cut off (%s) at %s after the claim: worst overlap %s; margin left before the lease expired when the cut run ended: %s; rescued at most %s after the cut",
			kind, each, how, describeOffsets(f.offsets), millis(f.worst), describeMargins(f.margins), f.recovery.Round(time.Millisecond))
		if len(f.steady) > 0 {
			res.note("%s cut in steady state (%s after the claim): margin %s", kind, f.steadyAt.Round(time.Millisecond), millis(f.steady[0].left))
		}
	}
	for _, r := range rs {
		if r.err != nil {
			res.check(false, "cut runtime %s failed: %v", r.kind, r.err)
		}
	}
	if !res.OK() {
		for _, r := range rs {
			if r.proc != nil {
				res.note("cut worker %d output: %s", r.worker, r.proc.logTail())
				break
			}
		}
	}
	return res, nil
}

// describeOffsets gives the range of a few offsets.
func describeOffsets(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	lo, hi := ds[0], ds[0]
	for _, d := range ds {
		lo, hi = min(lo, d), max(hi, d)
	}
	return fmt.Sprintf("%d points from %s to %s", len(ds), lo.Round(time.Millisecond), hi.Round(time.Millisecond))
}
