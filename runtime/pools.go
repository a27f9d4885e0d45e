package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/migrations"
)

// pingIdleAfter is how long a pooled connection may sit idle before it is
// pinged on its next use.
const pingIdleAfter = time.Minute

// controlConns is the size of the pool Fila opens for its own statements
// beside a Config.Pool: claims, outcomes (claimer.WriterParallelDefault
// statements at once), heartbeats, maintenance and the scheduler.
const controlConns = 6

// open connects, checks the database, and builds what needs it: the store,
// the worker's registry row and the wake source (told which database it
// must reach).
func (r *Runtime) open(ctx context.Context) error {
	if r.cfg.Pool != nil {
		r.pool = r.cfg.Pool
		// The application's handlers may hold every connection of its pool,
		// and queue for more: Fila's own statements (claims, heartbeats,
		// outcomes) would queue behind them, and a lease would expire while
		// its handler still runs. They get a small pool of their own, built
		// from the same configuration.
		cc := r.cfg.Pool.Config()
		cc.MaxConns, cc.MinConns = controlConns, 0
		cc.ShouldPing = shouldPing
		var err error
		if r.control, err = pgxpool.NewWithConfig(ctx, cc); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		r.ownsControl = true
	} else {
		pc, err := pgconfig.Pool(r.cfg.DSN)
		if err != nil {
			return fmt.Errorf("DSN: %w", err)
		}
		// Claims, outcomes, heartbeats and maintenance each need a
		// connection; handlers use their own pool, so these never wait
		// behind user work.
		if pc.MaxConns < controlConns {
			pc.MaxConns = controlConns
		}
		// pgxpool pings every connection idle for over a second before
		// handing it out: an idle worker would pay two statements per
		// safety poll instead of one, and every job after a pause one more
		// round trip before its claim. Ping only connections idle for long
		// enough that a server or pooler may have dropped them; a claim on
		// a dropped connection fails and is retried on a new one anyway.
		pc.ShouldPing = shouldPing
		r.pool, err = pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		r.owns = true
		r.control = r.pool
	}
	fail := func(err error) error {
		r.closePools()
		return err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	warm(pingCtx, r.control, warmConns)
	if err := r.control.Ping(pingCtx); err != nil {
		return fail(fmt.Errorf("cannot reach the database: %w", err))
	}
	if err := migrations.Check(pingCtx, r.control); err != nil {
		return fail(err)
	}
	r.store = claimer.New(r.control)
	if r.cfg.Pool != nil || !pgconfig.NamesExecMode(r.cfg.DSN) {
		r.setHotPathMode(pingCtx)
	}
	r.registry = newRegistry(r)
	if err := r.registry.registerKinds(pingCtx); err != nil {
		return fail(err)
	}
	if r.cfg.Mode == ModePoll {
		return nil
	}
	// The wake source must reach the database the jobs are in: one that
	// reaches another would wake nobody, and every job would wait for the
	// safety poll.
	expect, err := listener.ReadIdentity(pingCtx, r.control)
	if err != nil {
		r.log.Warn("cannot read the database's identity; the listen DSN is not checked against the main one",
			zap.Error(err))
	}
	src, err := r.newSource(expect)
	if err != nil {
		return fail(err)
	}
	r.ctlMu.Lock()
	r.source = src
	r.ctlMu.Unlock()
	return nil
}

// setHotPathMode sets the statement mode of Fila's hot path: prepared
// statements when the control pool reaches PostgreSQL directly, unnamed
// ones through a pooler (see pgconfig.HotPathMode). Measured on a claim of
// one job (interleaved, 900 each, loopback): the claim function called as a
// prepared statement 1.46 ms at the median, as an unnamed one 1.57 ms, and
// the claim as one plain unnamed statement, planned each time, 2.36 ms. The
// mode goes with each statement rather than into the pool's configuration,
// so the check runs on a connection the pool opened anyway: a connection
// of its own cost a worker's start one more connection setup (7 to 30 ms
// with TLS, while a backlog waited). If the check fails, unnamed statements
// work everywhere.
func (r *Runtime) setHotPathMode(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := r.control.Acquire(pctx)
	if err != nil {
		return // the statements that follow report an unreachable database
	}
	defer conn.Release()
	direct, err := pgconfig.IsDirect(pctx, conn.Conn())
	if err != nil {
		return
	}
	mode := pgconfig.HotPathMode(direct)
	r.store.SetStatementMode(mode)
	r.log.Debug("hot path statements", zap.Bool("direct", direct), zap.Stringer("mode", mode))
}

// warmConns is how many connections of the control pool are opened at
// start, at once: the first claim, the first outcome write and the
// registry's statements each need one.
const warmConns = 3

// warm opens up to n connections of pool concurrently. Opened on demand,
// they were set up one after another as each first statement needed one
// (some 30 to 40 ms each with TLS on a busy two-core machine), which
// delayed the first claim of a worker starting on a backlog. Failures are
// left to the ping that follows.
func warm(ctx context.Context, pool *pgxpool.Pool, n int) {
	n = min(n, int(pool.Config().MaxConns))
	conns := make([]*pgxpool.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			if c, err := pool.Acquire(ctx); err == nil {
				conns[i] = c
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
}

// shouldPing pings a pooled connection only after pingIdleAfter idle.
func shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > pingIdleAfter
}

// closePools closes the pools Fila opened.
func (r *Runtime) closePools() {
	if r.ownsControl {
		r.control.Close()
	}
	if r.owns {
		r.pool.Close()
	}
}

// warnIfTriggerOff warns when a notify-mode worker starts while the insert
// trigger's NOTIFY is switched off: it would learn of new jobs only from its
// safety poll.
func (r *Runtime) warnIfTriggerOff(ctx context.Context) {
	if r.cfg.Mode != ModeNotify {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	on, err := NotifyTriggerOn(cctx, r.control)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.log.Warn("cannot read whether the insert trigger notifies", zap.Error(err))
		}
		return
	}
	if !on {
		r.log.Warn("the insert trigger's NOTIFY is off (fila trigger off): this notify-mode worker learns of new jobs only from its safety poll; run `fila trigger on`, or run workers with --mode wal",
			zap.Duration("safety_poll", r.cfg.SafetyPoll))
	}
}
