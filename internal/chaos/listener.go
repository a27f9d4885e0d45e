package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// listenerRig is one runtime whose listener reaches PostgreSQL through a
// proxy, with a steady trickle of jobs.
type listenerRig struct {
	env   *Env
	db    *database
	px    *proxy
	lr    *liveRuntime
	tr    *trickle
	log   *runLog
	every time.Duration
}

func (e *Env) startListenerRig(ctx context.Context, name string, every time.Duration, tune func(*runtime.Config)) (*listenerRig, error) {
	db, err := e.newDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	r := &listenerRig{env: e, db: db, log: newRunLog(), every: every, tr: newTrickle()}
	target, err := hostPort(db.direct)
	if err != nil {
		r.close()
		return nil, err
	}
	if r.px, err = startProxy(target); err != nil {
		r.close()
		return nil, err
	}
	listenDSN, err := viaProxy(db.direct, r.px.addr(), 2)
	if err != nil {
		r.close()
		return nil, err
	}
	cfg := runtime.Config{
		DSN: db.dsn, ListenDSN: listenDSN, Concurrency: 4, Lease: 5 * time.Second,
		Kinds: []runtime.Kind{{Name: "record", Handler: func(ctx context.Context, j *runtime.Job) error {
			r.tr.pick(j.ID)
			i := r.log.begin(j.ID, j.Attempt, 0)
			r.log.end(i, true)
			return nil
		}}},
		// Only notifications (and the catch-up claims after reconnecting)
		// explain a quick pickup while the listener is healthy.
		SafetyPoll: 10 * time.Minute,
		Logger:     e.logger().Named(name),
	}
	if tune != nil {
		tune(&cfg)
	}
	if r.lr, err = startRuntime(ctx, cfg); err != nil {
		r.close()
		return nil, err
	}
	r.tr.start(db.pool, "record", every)
	warm := time.Now()
	if !waitFor(ctx, 30*time.Second, func() bool { n, picked, _ := r.tr.since(warm, time.Time{}); return n >= 5 && picked == n }) {
		r.close()
		return nil, fmt.Errorf("the first jobs were not picked up within 30s")
	}
	return r, nil
}

// listenerPID is the backend pid of the runtime's listener.
func (r *listenerRig) listenerPID(ctx context.Context) (int32, error) {
	var pid int32
	err := r.db.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1::text AND application_name = $2::text`,
		r.db.name, listener.ApplicationName).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("find the listener's backend: %w", err)
	}
	return pid, nil
}

func (r *listenerRig) terminateListener(ctx context.Context) error {
	pid, err := r.listenerPID(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := r.db.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1::int)", pid).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("terminate the listener's backend %d: %v", pid, err)
	}
	return nil
}

func (r *listenerRig) healthy() bool { return r.lr.rt.Stats().Healthy }

// probe waits until a job inserted now is picked up and returns its pickup
// delay, or false after within.
func (r *listenerRig) probe(ctx context.Context, within time.Duration) (time.Duration, bool) {
	from := time.Now()
	var d time.Duration
	ok := waitFor(ctx, within, func() bool {
		var picked bool
		d, picked = r.tr.firstPickAfter(from)
		return picked
	})
	return d, ok
}

// finish stops the trickle, waits for every job to complete, stops the
// runtime and fills res with what was lost, duplicated or overlapping.
func (r *listenerRig) finish(ctx context.Context, res *Result) error {
	r.tr.stop()
	res.check(r.tr.errs == 0, "%d inserts failed (last: %v)", r.tr.errs, r.tr.lastErr)
	var c tableCounts
	var err error
	waitFor(ctx, 30*time.Second, func() bool {
		c, err = countJobs(ctx, r.db.pool, false)
		return err == nil && c.completed == c.jobs
	})
	if err != nil {
		return err
	}
	res.check(r.lr.failed() == nil, "the runtime stopped: %v", r.lr.failed())
	if err := r.lr.stop(10 * time.Second); err != nil {
		res.check(false, "the runtime failed: %v", err)
	}
	runs := r.log.snapshot()
	res.Lost = c.jobs - c.completed
	res.Duplicated = len(okTwice(runs))
	res.overlapping(runs, time.Now())
	res.check(res.Lost == 0, "%d of %d jobs did not complete", res.Lost, c.jobs)
	res.check(res.Duplicated == 0, "jobs run twice: %s", ids(okTwice(runs), 10))
	res.check(res.Overlapping == 0, "jobs run twice at once")
	res.note("%d jobs inserted one at a time, every %s", c.jobs, r.every)
	return nil
}

func (r *listenerRig) close() {
	r.tr.stop()
	if r.lr != nil {
		_ = r.lr.stop(10 * time.Second)
	}
	if r.px != nil {
		_ = r.px.close()
	}
	r.db.drop()
}

// TerminateListener terminates the listener's backend with
// pg_terminate_backend while jobs trickle in. First the server takes the
// reconnection at once: the listener must be back (and a job inserted then
// picked up by its notification) within two seconds, and the jobs inserted
// during the gap picked up by the catch-up claim. Then the server refuses
// connections for three seconds: the listener must back off rather than
// hot-loop, and the poll must pick jobs up meanwhile.
func TerminateListener(ctx context.Context, env *Env, size Size) (*Result, error) {
	const every = 50 * time.Millisecond
	res := &Result{Load: "1 runtime; 1 job / 50 ms"}
	r, err := env.startListenerRig(ctx, "terminate", every, nil)
	if err != nil {
		return nil, err
	}
	defer r.close()

	// 1. Terminated; reconnecting works at once.
	env.progress("terminating the listener's backend")
	t0 := time.Now()
	if err := r.terminateListener(ctx); err != nil {
		return nil, err
	}
	res.check(waitFor(ctx, 10*time.Second, func() bool { return !r.healthy() }), "the runtime never noticed the listener's loss")
	if !waitFor(ctx, 20*time.Second, r.healthy) {
		res.check(false, "the listener did not come back within 20s")
		return res, r.finish(ctx, res)
	}
	back := time.Since(t0)
	backAt := time.Now()
	pickup, ok := r.probe(ctx, 10*time.Second)
	res.check(ok, "no job inserted after the listener came back was picked up within 10s")
	res.Recovery = back
	res.check(back <= 2*time.Second, "the listener took %s to come back (want at most 2s)", back.Round(time.Millisecond))
	res.check(pickup <= 2*time.Second, "a job inserted after the listener came back waited %s", pickup.Round(time.Millisecond))
	gapN, gapPicked, gapWorst := r.tr.since(t0, backAt)
	res.note("backend terminated: listener back (listening, catch-up claim sent) after %s; next job picked up by its notification %s after insert",
		back.Round(time.Millisecond), pickup.Round(time.Millisecond))
	res.note("%d jobs inserted during the gap, %d picked up, longest wait %s", gapN, gapPicked, gapWorst.Round(time.Millisecond))

	// 2. Terminated while the server refuses connections for a while.
	const down = 3 * time.Second
	env.progress("terminating the listener's backend again; refusing connections for %s", down)
	r.px.set(refuse)
	before := r.px.connections()
	t1 := time.Now()
	if err := r.terminateListener(ctx); err != nil {
		return nil, err
	}
	select {
	case <-time.After(down): // the length of the fault, not a wait for readiness
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	attempts := r.px.connections() - before
	_, _, downWorst := r.tr.since(t1.Add(time.Second), time.Now())
	r.px.set(forward)
	t2 := time.Now()
	res.check(attempts >= 2, "the listener tried to reconnect %d times in %s: it must keep trying", attempts, down)
	res.check(attempts <= 15, "the listener tried to reconnect %d times in %s: it must back off", attempts, down)
	res.check(downWorst <= 3*time.Second, "while the listener was down a job waited %s (the poll must run fast)", downWorst.Round(time.Millisecond))
	res.check(waitFor(ctx, 20*time.Second, r.healthy), "the listener did not come back within 20s of the server accepting connections")
	back2 := time.Since(t2)
	pickup2, ok := r.probe(ctx, 10*time.Second)
	res.check(ok && pickup2 <= 2*time.Second, "after the second reconnect a new job waited %s", pickup2.Round(time.Millisecond))
	res.note("server refusing connections for %s: %d reconnect attempts (backoff, no hot loop); jobs picked up by the fast poll meanwhile, longest wait %s; listener back %s after the server accepted again",
		down, attempts, downWorst.Round(time.Millisecond), back2.Round(time.Millisecond))
	return res, r.finish(ctx, res)
}

// HalfOpenListener silently drops every byte between the listener and
// PostgreSQL (both ends keep their sockets open, as after a network
// partition) while jobs trickle in. The listener's health check must find it
// within its ping interval and timeout, the poll must pick jobs up within
// about a second meanwhile, and the listener must come back once traffic
// flows again.
func HalfOpenListener(ctx context.Context, env *Env, size Size) (*Result, error) {
	const (
		every        = 100 * time.Millisecond
		pingInterval = 500 * time.Millisecond
		pingTimeout  = 500 * time.Millisecond
		partition    = 5 * time.Second
	)
	res := &Result{Load: "1 runtime; 1 job / 100 ms"}
	r, err := env.startListenerRig(ctx, "halfopen", every, func(c *runtime.Config) {
		c.ListenerPingInterval, c.ListenerPingTimeout = pingInterval, pingTimeout
	})
	if err != nil {
		return nil, err
	}
	defer r.close()

	env.progress("dropping the listener's traffic for %s", partition)
	t0 := time.Now()
	r.px.set(blackhole)
	detected := waitFor(ctx, 20*time.Second, func() bool { return !r.healthy() })
	detect := time.Since(t0)
	res.check(detected, "the half-open connection was not detected within 20s")
	res.check(detect <= pingInterval+pingTimeout+time.Second,
		"the half-open connection was detected after %s (ping interval %s + timeout %s)", detect.Round(time.Millisecond), pingInterval, pingTimeout)
	detectedAt := time.Now()
	select {
	case <-time.After(time.Until(t0.Add(partition))): // the length of the fault
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n, picked, worst := r.tr.since(detectedAt, time.Now().Add(-time.Second))
	r.px.set(forward)
	t1 := time.Now()
	res.check(n > 0, "no job was inserted while the listener was down")
	res.check(worst <= 2500*time.Millisecond, "while the listener was down a job waited %s (the poll must run at about 1s)", worst.Round(time.Millisecond))
	ok := waitFor(ctx, 30*time.Second, r.healthy)
	back := time.Since(t1)
	res.check(ok, "the listener did not come back within 30s of the traffic flowing again")
	pickup, ok := r.probe(ctx, 10*time.Second)
	res.check(ok && pickup <= 2*time.Second, "after the listener came back a new job waited %s", pickup.Round(time.Millisecond))
	res.Recovery = detect
	res.note("half-open listener detected after %s (ping interval %s, timeout %s)", detect.Round(time.Millisecond), pingInterval, pingTimeout)
	res.note("while it was down: %d jobs inserted, %d picked up by the fast poll, longest wait %s", n, picked, worst.Round(time.Millisecond))
	res.note("traffic flowing again: listener back after %s (an attempt stuck in the partition times out first: connect_timeout 2s); next job picked up by its notification %s after insert",
		back.Round(time.Millisecond), pickup.Round(time.Millisecond))
	return res, r.finish(ctx, res)
}
