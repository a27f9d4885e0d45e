package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/migrations"
)

// pingIdleAfter is how long a pooled connection may sit idle before it is
// pinged on its next use.
const pingIdleAfter = time.Minute

// controlConns is the size of the pool Fila opens for its own statements
// beside a Config.Pool: one each for claims, outcomes, heartbeats and
// retention.
const controlConns = 4

// claimTimeout bounds one claim statement, which is not cancelled by a stop.
const claimTimeout = 30 * time.Second

// ErrClosed is returned by Run when the Runtime already ran.
var ErrClosed = errors.New("fila: runtime already ran; create a new one")

// wakeSource is what the runtime needs of a listener.
type wakeSource interface {
	Run(ctx context.Context) error
	Wakes() <-chan struct{}
	Ready() <-chan struct{}
	Healthy() bool
	HealthChanges() <-chan struct{}
}

// Stats are counters since the Runtime started.
type Stats struct {
	Claimed   uint64 // attempts claimed
	Completed uint64 // attempts that succeeded
	Failed    uint64 // attempts that returned an error or panicked
	LeaseLost uint64 // attempts whose result was rejected or cancelled for a lost lease
	Released  uint64 // attempts given back at shutdown
	Running   int    // handlers running now
	Healthy   bool   // the wake source is healthy (always false in poll mode)
}

// Runtime runs handlers for jobs of its queues.
type Runtime struct {
	cfg    Config
	log    *zap.Logger
	kinds  map[string]Kind
	pool   *pgxpool.Pool
	owns   bool // Fila opened pool and must close it
	store  *claimer.Store
	writer *claimer.Writer
	poller *fallbackpoll.Poller
	source wakeSource

	// control runs Fila's own statements: pool when Fila opened it, else a
	// small pool of its own so user work on Config.Pool cannot starve it.
	control     *pgxpool.Pool
	ownsControl bool

	started      atomic.Bool
	ready        chan struct{}
	done         chan struct{}
	stopClaiming context.CancelFunc
	cancelWork   context.CancelCauseFunc
	workCtx      context.Context
	ctlMu        sync.Mutex // guards stopClaiming and cancelWork before Run sets them
	claimingDone chan struct{}

	slots     chan struct{} // one token per running handler
	slotFreed chan struct{}
	handlers  sync.WaitGroup

	mu       sync.Mutex
	owned    map[int64]*ownedJob
	toReturn []claimer.Attempt

	claimed, completed, failed, leaseLost, released atomic.Uint64
	completedSinceRetention                         atomic.Int64
}

type ownedJob struct {
	job     *Job
	cancel  context.CancelCauseFunc
	renewed time.Time // local monotonic time of the claim or last good heartbeat
}

// New checks cfg and returns a Runtime; it connects nothing until Run.
func New(cfg Config) (*Runtime, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fila config: %w", err)
	}
	r := &Runtime{
		cfg: cfg, log: cfg.Logger.Named("runtime"), kinds: map[string]Kind{},
		ready: make(chan struct{}), done: make(chan struct{}), claimingDone: make(chan struct{}),
		slots: make(chan struct{}, cfg.Concurrency), slotFreed: make(chan struct{}, 1),
		owned: map[int64]*ownedJob{},
	}
	for _, k := range cfg.Kinds {
		r.kinds[k.Name] = k
	}
	var err error
	r.poller, err = fallbackpoll.New(cfg.Poll)
	if err != nil {
		return nil, fmt.Errorf("fila config: Poll: %w", err)
	}
	switch cfg.Mode {
	case ModeNotify:
		r.source, err = listener.New(listener.Config{DSN: cfg.ListenDSN, Queues: cfg.Queues, Logger: cfg.Logger,
			PingInterval: cfg.ListenerPingInterval, PingTimeout: cfg.ListenerPingTimeout})
	case ModeWAL:
		r.source, err = newWALSource(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("fila config: %w", err)
	}
	return r, nil
}

// Ready is closed once the runtime listens and claims.
func (r *Runtime) Ready() <-chan struct{} { return r.ready }

// Done is closed when Run has returned.
func (r *Runtime) Done() <-chan struct{} { return r.done }

// Stats returns counters since Run started.
func (r *Runtime) Stats() Stats {
	s := Stats{Claimed: r.claimed.Load(), Completed: r.completed.Load(), Failed: r.failed.Load(),
		LeaseLost: r.leaseLost.Load(), Released: r.released.Load(), Running: len(r.slots)}
	if r.source != nil {
		s.Healthy = r.source.Healthy()
	}
	return s
}

// Pool is Config.Pool, or the pool the runtime opened from DSN (nil before
// Run). Handlers that hold connections for long should not use the latter:
// give the runtime your own pool as Config.Pool instead, and Fila runs its
// claims, heartbeats and outcomes on a small pool of its own beside it.
func (r *Runtime) Pool() *pgxpool.Pool { return r.pool }

// Run checks the database, then claims and runs jobs until ctx is cancelled
// or Stop is called. Cancelling ctx is a hard stop: running handlers are
// cancelled and their jobs returned to pending at once. Use Stop for a
// graceful one. Run returns nil after a stop, or the error that made a
// component unable to go on.
func (r *Runtime) Run(ctx context.Context) (err error) {
	if !r.started.CompareAndSwap(false, true) {
		return ErrClosed
	}
	defer close(r.done)
	claimCtx, stopClaiming := context.WithCancel(ctx)
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	r.ctlMu.Lock()
	r.stopClaiming, r.cancelWork, r.workCtx = stopClaiming, cancelWork, workCtx
	r.ctlMu.Unlock()
	defer stopClaiming()
	defer cancelWork(ErrShutdown)
	stopHard := context.AfterFunc(ctx, func() { cancelWork(ErrShutdown) })
	defer stopHard()

	if err := r.open(ctx); err != nil {
		close(r.claimingDone)
		return err
	}
	defer r.closePools()

	// Outcomes are written on a context that outlives claiming and handlers,
	// so stopping never loses a result that is ready.
	writerCtx, cancelWriter := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWriter()
	r.writer = claimer.NewWriter(r.store, claimer.WriterConfig{
		MaxBatch: r.cfg.ClaimBatch, Logger: r.log, OnWritten: r.written,
	})
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); _ = r.writer.Run(writerCtx) }()

	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); r.heartbeatLoop(hbCtx) }()

	g, gctx := errgroup.WithContext(claimCtx)
	if r.source != nil {
		g.Go(func() error {
			// The source fails only when the listen DSN cannot serve it (a
			// pooler in the way, a server without logical replication):
			// name the setting to change.
			if err := r.source.Run(gctx); err != nil {
				return fmt.Errorf("fila: ListenDSN: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error { return r.poller.Run(gctx) })
	g.Go(func() error { return r.claimLoop(gctx) })
	g.Go(func() error { return r.maintenanceLoop(gctx) })
	r.log.Info("runtime started", zap.Strings("queues", r.cfg.Queues), zap.String("mode", string(r.cfg.Mode)),
		zap.Int("concurrency", r.cfg.Concurrency), zap.Duration("lease", r.cfg.Lease),
		zap.Strings("kinds", r.kindNames()))
	err = g.Wait()
	close(r.claimingDone)
	if err != nil {
		r.log.Error("runtime stopping: a component cannot go on", zap.Error(err))
		cancelWork(ErrShutdown)
	}

	r.waitHandlers(workCtx)
	stopHeartbeats()
	<-hbDone
	r.returnUnfinished()
	r.writer.Close()
	select {
	case <-writerDone:
	case <-time.After(30 * time.Second):
		cancelWriter()
		<-writerDone
	}
	s := r.Stats()
	r.log.Info("runtime stopped", zap.Uint64("claimed", s.Claimed), zap.Uint64("completed", s.Completed),
		zap.Uint64("failed", s.Failed), zap.Uint64("released", s.Released))
	return err
}

// Stop stops claiming and waits for running handlers until ctx expires, then
// cancels them (their jobs go back to pending at once) and waits for Run to
// return. It returns ctx.Err() if handlers had to be cancelled.
func (r *Runtime) Stop(ctx context.Context) error {
	r.ctlMu.Lock()
	stopClaiming, cancelWork := r.stopClaiming, r.cancelWork
	r.ctlMu.Unlock()
	if stopClaiming == nil {
		return nil // never ran
	}
	stopClaiming()
	var err error
	select {
	case <-r.done:
		return nil
	case <-r.handlersIdleAfterClaiming():
	case <-ctx.Done():
		err = ctx.Err()
		r.log.Warn("shutdown deadline passed; cancelling running handlers", zap.Int("running", len(r.slots)))
		cancelWork(ErrShutdown)
	}
	<-r.done
	return err
}

func (r *Runtime) handlersIdleAfterClaiming() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		<-r.claimingDone
		r.handlers.Wait()
		close(ch)
	}()
	return ch
}

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
			return fmt.Errorf("fila: connect: %w", err)
		}
		r.ownsControl = true
	} else {
		pc, err := pgconfig.Pool(r.cfg.DSN)
		if err != nil {
			return fmt.Errorf("fila: DSN: %w", err)
		}
		// Claims, outcomes and heartbeats each need a connection; handlers
		// use their own pool, so these never wait behind user work.
		if pc.MaxConns < 4 {
			pc.MaxConns = 4
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
			return fmt.Errorf("fila: connect: %w", err)
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
	if err := r.control.Ping(pingCtx); err != nil {
		return fail(fmt.Errorf("fila: cannot reach the database: %w", err))
	}
	if err := migrations.Check(pingCtx, r.control); err != nil {
		return fail(fmt.Errorf("fila: %w", err))
	}
	r.store = claimer.New(r.control)
	if err := r.registerKinds(pingCtx); err != nil {
		return fail(err)
	}
	return nil
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

// registerKinds records the kinds this worker handles, so `fila enqueue` can
// refuse a kind no worker knows.
func (r *Runtime) registerKinds(ctx context.Context) error {
	names := r.kindNames()
	queue := r.cfg.Queues[0]
	_, err := r.control.Exec(ctx, `INSERT INTO fila_kinds (kind, queue)
SELECT k, $2::text FROM unnest($1::text[]) AS k
ON CONFLICT (kind) DO UPDATE SET last_seen_at = now(), queue = EXCLUDED.queue`, names, queue)
	if err != nil {
		return fmt.Errorf("fila: register kinds: %w", err)
	}
	return nil
}

func (r *Runtime) kindNames() []string {
	names := make([]string, 0, len(r.kinds))
	for n := range r.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// claimLoop claims whenever there may be work and a handler slot is free.
func (r *Runtime) claimLoop(ctx context.Context) error {
	var wakes, health <-chan struct{}
	if r.source != nil {
		// LISTEN first, then scan: nothing committed in between is missed.
		select {
		case <-r.source.Ready():
		case <-ctx.Done():
			return nil
		}
		wakes, health = r.source.Wakes(), r.source.HealthChanges()
		r.poller.SetHealthy(r.source.Healthy())
	}
	close(r.ready)
	errBackoff := backoff.NewExponentialBackOff()
	errBackoff.InitialInterval = 100 * time.Millisecond
	errBackoff.MaxInterval = 5 * time.Second
	errBackoff.MaxElapsedTime = 0
	// A claim of one job per freed slot would cost a statement per job under
	// load; once busy, wait until a tenth of the slots are free.
	threshold := max(1, r.cfg.Concurrency/10)
	dirty := true
	for {
		if dirty {
			free := r.cfg.Concurrency - len(r.slots)
			if free > 0 && (free >= threshold || len(r.slots) == 0) {
				var err error
				dirty, err = r.claimRound(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					wait := errBackoff.NextBackOff()
					r.log.Error("claim failed; will retry", zap.Duration("retry_in", wait), zap.Error(err))
					dirty = true
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return nil
					}
				} else {
					errBackoff.Reset()
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wakes:
			dirty = true
		case <-r.poller.Wakes():
			dirty = true
		case <-health:
			r.poller.SetHealthy(r.source.Healthy())
		case <-r.slotFreed:
		}
	}
}

// claimRound claims from each queue once and reports whether there may be
// more work right now.
func (r *Runtime) claimRound(ctx context.Context) (more bool, err error) {
	var (
		found      int
		due        time.Duration
		hasDue     bool
		incomplete bool
	)
	for _, q := range r.cfg.Queues {
		free := r.cfg.Concurrency - len(r.slots)
		if free <= 0 {
			more, incomplete = true, true
			break
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		limit := min(free, r.cfg.ClaimBatch)
		// A claim that reached the server may commit even if the client
		// gives up on it: stopping must not cancel it halfway, or its jobs
		// would sit running, owned by nobody, until their leases expire.
		// Its jobs are dispatched even when stopping; the drain runs them
		// or a hard stop returns them at once.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		res, err := r.store.Claim(cctx, q, limit, r.cfg.Lease)
		cancel()
		if err != nil {
			return true, err
		}
		if res.Rescued > 0 {
			r.log.Warn("rescued jobs whose lease expired", zap.Int("jobs", res.Rescued))
		}
		for _, j := range res.Jobs {
			r.dispatch(j)
		}
		found += len(res.Jobs)
		if len(res.Jobs) == limit || res.Rescued > 0 {
			more = true
		}
		if res.HasNextDue && (!hasDue || res.NextDue < due) {
			due, hasDue = res.NextDue, true
		}
	}
	r.poller.Claimed(found)
	// Only ever move the timer earlier: a retry written while this claim was
	// on the wire set a due time the claim's snapshot could not see, and
	// must not be cleared. A due time that turns out stale costs one claim.
	if !more && !incomplete && hasDue {
		r.poller.DueWithin(due)
	}
	return more, nil
}

func (r *Runtime) dispatch(cj *claimer.Job) {
	r.slots <- struct{}{}
	r.claimed.Add(1)
	job := &Job{ID: cj.ID, Queue: cj.Queue, Kind: cj.Kind, Payload: cj.Payload, Priority: cj.Priority,
		Attempt: cj.Attempt, MaxAttempts: cj.MaxAttempts, CreatedAt: cj.CreatedAt}
	hctx, cancel := context.WithCancelCause(r.workCtx)
	r.mu.Lock()
	r.owned[job.ID] = &ownedJob{job: job, cancel: cancel, renewed: time.Now()}
	r.mu.Unlock()
	r.handlers.Add(1)
	go r.work(hctx, cancel, job)
}

func (r *Runtime) work(ctx context.Context, cancel context.CancelCauseFunc, job *Job) {
	defer r.handlers.Done()
	defer func() {
		<-r.slots
		select {
		case r.slotFreed <- struct{}{}:
		default:
		}
	}()
	// The job's logger is built only on the paths that log: With encodes its
	// fields at once, which every job would pay even when nothing is logged.
	log := func() *zap.Logger {
		return r.log.With(zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt))
	}
	kind, known := r.kinds[job.Kind]
	var err error
	start := time.Now()
	if !known {
		// Retry rather than kill: during a rolling deploy a newer worker may
		// know the kind. After max_attempts the job is dead with this error.
		err = fmt.Errorf("no handler for kind %q on this worker (it handles %s)", job.Kind, strings.Join(r.kindNames(), ", "))
	} else {
		hctx := ctx
		if kind.Timeout > 0 {
			var c context.CancelFunc
			hctx, c = context.WithTimeoutCause(ctx, kind.Timeout, fmt.Errorf("timed out after %s", kind.Timeout))
			defer c()
		}
		err = call(hctx, kind.Handler, job)
		if err != nil && hctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (handler error: %v)", context.Cause(hctx), err)
		}
	}
	r.mu.Lock()
	delete(r.owned, job.ID)
	r.mu.Unlock()
	cause := context.Cause(ctx)
	cancel(nil)

	out := claimer.Outcome{ID: job.ID, Attempt: job.Attempt}
	switch {
	case err == nil && job.completedInTx.Load():
		// Completed in the handler's own transaction: nothing left to write.
		// Checked before a lost lease: a heartbeat that runs between that
		// commit and the handler's return finds the row no longer running
		// and cancels the handler, but the completion is already committed
		// (CompleteTx is fenced on the attempt, so it only succeeds while
		// the lease is this worker's).
		r.completed.Add(1)
		return
	case errors.Is(cause, ErrLeaseLost):
		r.leaseLost.Add(1)
		log().Warn("lease lost while the handler ran; its result is discarded", zap.Error(err))
		return
	case err == nil:
		out.OK = true
		if ce := r.log.Check(zap.DebugLevel, "job completed"); ce != nil {
			ce.Write(zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
				zap.Duration("took", time.Since(start)))
		}
	case errors.Is(cause, ErrShutdown):
		// Interrupted by a hard stop: give the job back now rather than
		// waiting for its lease. Not a failure of the job.
		r.mu.Lock()
		r.toReturn = append(r.toReturn, job.attempt())
		r.mu.Unlock()
		log().Info("handler cancelled by shutdown; job will be returned to the queue", zap.Error(err))
		return
	default:
		r.failed.Add(1)
		out.Err = truncate(err.Error(), 4000)
		out.Permanent = IsPermanent(err)
		out.Delay = r.retryDelay(job.Attempt)
		log().Warn("job attempt failed", zap.Bool("permanent", out.Permanent),
			zap.Bool("last_attempt", job.Attempt >= job.MaxAttempts), zap.Error(err))
	}
	r.writer.Submit(out)
}

// call runs h, turning a panic into an error with its stack.
func call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 4096)
			buf = buf[:goruntime.Stack(buf, false)]
			err = fmt.Errorf("handler panicked: %v\n%s", p, buf)
		}
	}()
	return h(ctx, job)
}

// retryDelay is RetryBase·2^(attempt-1), capped at RetryMax, with "equal
// jitter": half fixed, half random, so retries of a failed burst spread out.
func (r *Runtime) retryDelay(attempt int) time.Duration {
	d := r.cfg.RetryBase
	for i := 1; i < attempt && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.cfg.RetryMax)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// written is called by the writer after each batch.
func (r *Runtime) written(fin []claimer.Finished) {
	for _, f := range fin {
		switch f.State {
		case "completed":
			r.completed.Add(1)
			r.completedSinceRetention.Add(1)
		case "pending":
			r.poller.DueWithin(f.DueIn)
		case "dead":
			r.log.Warn("job is dead", zap.Int64("job_id", f.ID))
		case claimer.StateFenced:
			r.log.Warn("result rejected: the attempt is no longer this worker's (lease lost, or completed in the handler's transaction)",
				zap.Int64("job_id", f.ID))
		}
	}
}

// heartbeatLoop extends the leases of running jobs and cancels the handlers
// of jobs this worker no longer owns.
func (r *Runtime) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		owned := make([]claimer.Attempt, 0, len(r.owned))
		for _, o := range r.owned {
			owned = append(owned, o.job.attempt())
		}
		r.mu.Unlock()
		if len(owned) == 0 {
			continue
		}
		sent := time.Now()
		// A slow heartbeat that still lands before the lease runs out keeps
		// the job; giving up at the next tick would only let it expire.
		hbCtx, cancel := context.WithTimeout(ctx, r.cfg.Lease/2)
		kept, err := r.store.Heartbeat(hbCtx, owned, r.cfg.Lease)
		cancel()
		r.mu.Lock()
		for _, a := range owned {
			o := r.owned[a.ID]
			if o == nil || o.job.Attempt != a.Attempt {
				continue // finished meanwhile
			}
			switch {
			case err == nil && kept[a.ID]:
				o.renewed = sent
			case err == nil:
				o.cancel(ErrLeaseLost)
			case time.Since(o.renewed) > r.cfg.Lease-r.cfg.HeartbeatInterval/2:
				// The lease cannot be confirmed and is about to run out: stop
				// rather than risk running alongside the worker that rescues it.
				o.cancel(ErrLeaseLost)
			}
		}
		r.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			r.log.Error("heartbeat failed; will retry", zap.Int("jobs", len(owned)), zap.Error(err))
		} else if err == nil && len(kept) < len(owned) {
			r.log.Warn("leases lost; cancelling those handlers", zap.Int("lost", len(owned)-len(kept)))
		}
	}
}

// waitHandlers waits for running handlers; once work is cancelled it waits at
// most HardStopGrace for handlers that ignore their context.
func (r *Runtime) waitHandlers(workCtx context.Context) {
	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-workCtx.Done():
	}
	select {
	case <-done:
	case <-time.After(r.cfg.HardStopGrace):
		r.mu.Lock()
		ids := make([]int64, 0, len(r.owned))
		for id := range r.owned {
			ids = append(ids, id)
		}
		r.mu.Unlock()
		r.log.Error("handlers ignored cancellation; their jobs return when their leases expire",
			zap.Int64s("job_ids", ids))
	}
}

// returnUnfinished gives jobs interrupted by a hard stop back to the queue.
func (r *Runtime) returnUnfinished() {
	r.mu.Lock()
	ret := r.toReturn
	r.toReturn = nil
	r.mu.Unlock()
	if len(ret) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := r.store.Release(ctx, ret, "interrupted by worker shutdown")
	if err != nil {
		r.log.Error("could not return interrupted jobs; they return when their leases expire",
			zap.Int("jobs", len(ret)), zap.Error(err))
		return
	}
	r.released.Add(uint64(n))
	r.log.Info("returned interrupted jobs to the queue", zap.Int("jobs", n))
}

// maintenanceLoop deletes old completed jobs. It only runs after this worker
// completed jobs (or once an hour), so an idle worker costs no queries.
func (r *Runtime) maintenanceLoop(ctx context.Context) error {
	if r.cfg.Retention < 0 {
		return nil
	}
	const every = time.Minute
	last := time.Now()
	for {
		jitter := time.Duration(rand.Int64N(int64(every / 4)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every + jitter):
		}
		if r.completedSinceRetention.Load() == 0 && time.Since(last) < time.Hour {
			continue
		}
		r.completedSinceRetention.Store(0)
		last = time.Now()
		var total int64
		for i := 0; i < 100; i++ {
			n, err := r.store.DeleteCompleted(ctx, r.cfg.Retention, 1000)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Error("retention failed; will retry", zap.Error(err))
				}
				break
			}
			total += n
			if n < 1000 {
				break
			}
		}
		if total > 0 {
			r.log.Info("deleted completed jobs past retention", zap.Int64("jobs", total),
				zap.Duration("retention", r.cfg.Retention))
		}
	}
}
