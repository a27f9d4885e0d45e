package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
// beside a Config.Pool: claims, outcomes (one statement at a time, see
// claimer.Writer), heartbeats, maintenance and the scheduler.
const controlConns = 6

// open connects, checks the database, and builds what needs it: the store,
// the worker's registry row and the wake source (told which database it
// must reach).
func (r *Runtime) open(ctx context.Context) error {
	r.pingAfter.Store(int64(pingIdleAfter))
	if r.cfg.Pool != nil {
		r.pool = r.cfg.Pool
		// The application's handlers may hold every connection of its pool,
		// and queue for more: Fila's own statements (claims, heartbeats,
		// outcomes) would queue behind them, and a lease would expire while
		// its handler still runs. They get a small pool of their own, built
		// from the same configuration.
		cc := r.cfg.Pool.Config()
		cc.MaxConns, cc.MinConns = controlConns, 0
		cc.ShouldPing = r.shouldPing
		// pgx's default caches a prepared statement per query: through
		// PgBouncer in transaction mode the prepare and the execution
		// can reach different server connections ("prepared statement
		// stmtcache_… does not exist"), and the checks before the hot
		// path's mode is chosen, and the batches, take the pool's default.
		// Unnamed statements by default, as a pool Fila opens from a DSN;
		// the hot path still prepares its statements when the database
		// is reached directly (setHotPathMode).
		if cc.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			cc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
		if r.cfg.Schema != "" {
			if err := UseSchema(cc, r.cfg.Schema); err != nil {
				return fmt.Errorf("Schema: %w", err)
			}
		}
		var err error
		if r.control, err = r.readOnly.openPool(ctx, cc); err != nil {
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
		pc.ShouldPing = r.shouldPing
		if r.cfg.Schema != "" {
			if err := UseSchema(pc, r.cfg.Schema); err != nil {
				return fmt.Errorf("Schema: %w", err)
			}
		}
		r.pool, err = r.readOnly.openPool(ctx, pc)
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
		if r.cfg.Schema != "" && pgconfig.SearchPathRefused(err) {
			return fail(fmt.Errorf("cannot reach the database with Schema %s: %s: %w", r.cfg.Schema, pgconfig.SearchPathAdvice, err))
		}
		return fail(fmt.Errorf("cannot reach the database: %w", err))
	}
	r.store = claimer.New(r.control)
	r.store.SetLogger(r.log.Named("store"))
	r.checkSession(pingCtx)
	// Through the store: under a tiny statement_timeout this first read of
	// a table must carry its own, as every later statement does.
	if err := untilNoSessionTimeout(pingCtx, func() error { return migrations.Check(pingCtx, storeQuerier{r.store}) }); err != nil {
		if r.cfg.Schema != "" && errors.Is(err, migrations.ErrNotMigrated) {
			return fail(fmt.Errorf("schema %s: %w; with --schema %s, or migrations.MigrateIn", r.cfg.Schema, err, r.cfg.Schema))
		}
		return fail(err)
	}
	if r.cfg.Pool != nil || !pgconfig.NamesExecMode(r.cfg.DSN) {
		r.setHotPathMode(pingCtx)
	}
	r.registry = newRegistry(r)
	r.store.SetWorker(r.registry.id)
	if err := untilNoSessionTimeout(pingCtx, func() error { return r.registry.registerKinds(pingCtx) }); err != nil {
		return fail(err)
	}
	if r.cfg.Mode == ModePoll {
		return nil
	}
	if err := untilNoSessionTimeout(pingCtx, func() error { return r.resolveSchema(pingCtx) }); err != nil {
		return fail(err)
	}
	// The wake source must reach the database the jobs are in: one that
	// reaches another would wake nobody, and every job would wait for the
	// safety poll.
	var expect listener.Identity
	err := untilNoSessionTimeout(pingCtx, func() (err error) {
		expect, err = listener.ReadIdentity(pingCtx, r.control)
		return err
	})
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

// untilNoSessionTimeout runs fn, a statement of the start-up, again while
// the session's own statement_timeout cancels it, backing off, until ctx
// ends. The store then sets its own timeout, but the BEGIN and set_config
// that do so still run under the session's: with a timeout of a few
// milliseconds on a saturated machine, those alone can run out of time,
// and a worker that gave up there never started (one of six, starting
// beside a load average of 15).
func untilNoSessionTimeout(ctx context.Context, fn func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := fn()
		if err == nil || !claimer.IsSessionTimeout(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
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

// checkSession makes the store set its isolation and statement timeouts
// itself when the session's defaults are not READ COMMITTED and no
// statement_timeout (see claimer.SetExplicitSession). A failure to read
// them is left to the statements that follow: the store also switches at
// the first statement those defaults fail.
//
// It also reads idle_session_timeout (PostgreSQL 14 and later): the server
// ends a session idle for that long, and a pooled connection it ended
// failed the next statement that used it (a claim after a quiet spell,
// logged as failed and retried after a backoff). Connections idle for half
// of it are pinged before use from then on: a live one answers, a dead one
// is replaced before any statement of Fila's meets it.
func (r *Runtime) checkSession(ctx context.Context) {
	var iso, timeout string
	var idleMs float64
	if err := r.control.QueryRow(ctx, `SELECT current_setting('transaction_isolation'), current_setting('statement_timeout'),
		coalesce(extract(epoch FROM current_setting('idle_session_timeout', true)::interval) * 1000, 0)::float8`).
		Scan(&iso, &timeout, &idleMs); err != nil {
		return
	}
	if d := time.Duration(idleMs * float64(time.Millisecond)); d > 0 && d/2 < pingIdleAfter {
		r.pingAfter.Store(int64(d / 2))
		r.log.Info("the database ends idle sessions: pooled connections idle for half that long are pinged before use",
			zap.Duration("idle_session_timeout", d))
	}
	if iso != "read committed" || timeout != "0" {
		r.store.SetExplicitSession(true)
		r.log.Info("the database's session defaults do not suit Fila's statements: they set their own isolation and timeouts",
			zap.String("default_isolation", iso), zap.String("statement_timeout", timeout))
	}
}

// storeQuerier runs a migrations.Querier's statements through the store.
type storeQuerier struct{ s *claimer.Store }

func (q storeQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return storeRow{ctx: ctx, s: q.s, sql: sql, args: args}
}

// storeRow is a row read when it is scanned.
type storeRow struct {
	ctx  context.Context
	s    *claimer.Store
	sql  string
	args []any
}

func (r storeRow) Scan(dest ...any) error { return r.s.QueryRow(r.ctx, r.sql, r.args, dest...) }

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

// shouldPing pings a pooled connection only after pingIdleAfter idle, or
// half the sessions' idle_session_timeout when that is shorter (see
// checkSession).
func (r *Runtime) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	return p.IdleDuration > time.Duration(r.pingAfter.Load())
}

// closePools closes the pools Fila opened. After a stop the database did
// not answer (Run's cleanup ran out of time), it waits at most
// poolCloseWait and leaves the rest to a goroutine: a stop must not
// outlast its deadline on connections that cannot be closed cleanly.
func (r *Runtime) closePools() {
	closeAll := func() {
		if r.ownsControl {
			r.control.Close()
		}
		if r.owns {
			r.pool.Close()
		}
	}
	if !r.closeInBackground.Load() {
		closeAll()
		return
	}
	done := make(chan struct{})
	go func() { defer close(done); closeAll() }()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
		r.log.Warn("the database does not answer; its connections are closed in the background", zap.Duration("waited", poolCloseWait))
	}
}

// poolCloseWait bounds closePools after a stop the database did not answer.
const poolCloseWait = 500 * time.Millisecond

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
