package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// sqlStateReadOnly is read_only_sql_transaction: the server refuses a
// write because it is a standby (in recovery), or because the session is
// read-only by default (default_transaction_read_only, as some tools set on
// a demoted primary).
const sqlStateReadOnly = "25006"

// readOnlyLogEvery rate-limits the warning about read-only connections:
// while no node accepts writes, every retried claim finds one.
const readOnlyLogEvery = 5 * time.Second

// IsReadOnly reports whether err says the server refused a write because
// the connection is on a read-only server: a standby, or a primary made
// read-only. Such a connection stays useless, however long it is kept.
func IsReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlStateReadOnly
}

// readOnlyGuard drops the connections of the pools Fila opened as soon as
// one statement on any of them is refused as read-only, so the next
// statements reconnect, through a multi-host DSN with
// target_session_attrs=read-write, to whichever node is the primary now.
//
// pgx validates target_session_attrs only when it connects: a connection
// that was opened to a primary that is read-only now, or that landed on a
// standby through a DSN that does not ask for read-write, keeps failing
// every write (every claim, heartbeat and outcome) until the pool happens
// to retire it, an hour later by default. One such connection means the
// others of the pool very likely reach the same server, so the whole pool
// is reset (pgxpool.Pool.Reset closes the idle connections at once and
// the busy ones when they are released), not just the one that failed.
//
// The guard is a pgx tracer on the pools' connections rather than a check
// at each caller, so that every statement Fila runs on them is covered —
// claims, outcomes, heartbeats, maintenance, the scheduler, handlers using
// Runtime.Pool — including those added later. A pool passed as Config.Pool
// belongs to the application and is left alone.
type readOnlyGuard struct {
	log    *zap.Logger
	resets atomic.Uint64

	mu       sync.Mutex
	pools    []*pgxpool.Pool
	lastLog  time.Time
	unlogged uint64 // resets since the last warning
}

func newReadOnlyGuard(log *zap.Logger) *readOnlyGuard {
	return &readOnlyGuard{log: log.Named("readonly")}
}

// openPool opens a pool of Fila's own from cfg, watched by the guard.
func (g *readOnlyGuard) openPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	if prev := cfg.ConnConfig.Tracer; prev != nil {
		cfg.ConnConfig.Tracer = multitracer.New(prev, g)
	} else {
		cfg.ConnConfig.Tracer = g
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.pools = append(g.pools, pool)
	g.mu.Unlock()
	return pool, nil
}

// found resets every watched pool after err, a read-only refusal on conn.
func (g *readOnlyGuard) found(conn *pgx.Conn, err error) {
	g.resets.Add(1)
	g.mu.Lock()
	pools := g.pools
	g.unlogged++
	logNow := time.Since(g.lastLog) >= readOnlyLogEvery
	var n uint64
	if logNow {
		g.lastLog, n, g.unlogged = time.Now(), g.unlogged, 0
	}
	g.mu.Unlock()
	for _, p := range pools {
		p.Reset()
	}
	if logNow {
		g.log.Warn("a connection is on a read-only server (a standby, or a primary made read-only): "+
			"dropping the pool's connections so the next statements reconnect; give the DSN every node and "+
			"target_session_attrs=read-write to reach the new primary",
			// The address connected to: with several hosts in the DSN, the
			// configuration names only the first.
			zap.Stringer("server", conn.PgConn().Conn().RemoteAddr()), zap.Uint64("resets", n), zap.Error(err))
	}
}

func (g *readOnlyGuard) check(conn *pgx.Conn, err error) {
	if err != nil && IsReadOnly(err) {
		g.found(conn, err)
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (g *readOnlyGuard) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (g *readOnlyGuard) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	g.check(conn, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (g *readOnlyGuard) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (g *readOnlyGuard) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	g.check(conn, data.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (g *readOnlyGuard) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceCopyFromStart implements pgx.CopyFromTracer.
func (g *readOnlyGuard) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	return ctx
}

// TraceCopyFromEnd implements pgx.CopyFromTracer.
func (g *readOnlyGuard) TraceCopyFromEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	g.check(conn, data.Err)
}
