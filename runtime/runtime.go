package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/listener"
)

// ErrClosed is returned by Run when the Runtime already ran.
var ErrClosed = errors.New("fila: runtime already ran; create a new one")

// wakeSource is what the runtime needs of a listener.
type wakeSource interface {
	Run(ctx context.Context) error
	WakesFor(queue string) <-chan struct{}
	Ready() <-chan struct{}
	Healthy() bool
	HealthChanges() <-chan struct{}
	Stats() listener.Stats
	// AddQueue follows one more queue; what it returns is closed once an
	// event of the queue committed afterwards is sure to wake it.
	AddQueue(queue string) (<-chan struct{}, error)
	RemoveQueue(queue string) error
}

// Stats are counters since the Runtime started.
type Stats struct {
	Claimed   uint64 // attempts claimed
	Completed uint64 // attempts that succeeded
	Failed    uint64 // attempts that returned an error or panicked
	LeaseLost uint64 // attempts whose result was discarded for a lost lease
	Cancelled uint64 // attempts stopped because an operator cancelled the job
	Released  uint64 // attempts given back at shutdown
	Running   int    // handlers running now
	Healthy   bool   // the wake source is healthy (always false in poll mode)
	// Reconnects counts the wake source's reconnections after a lost
	// connection.
	Reconnects uint64
	// ClaimedByID counts the attempts among Claimed that were claimed by
	// the id their notification named, without reading the queue's head.
	ClaimedByID uint64
	// Snoozed counts attempts whose handler asked to run later (Snooze).
	Snoozed uint64
	// ReadOnlyResets counts the times a statement on one of Fila's pools was
	// refused as read-only (SQLSTATE 25006: a standby, or a primary made
	// read-only) and the pools' connections were dropped to reconnect.
	ReadOnlyResets uint64
}

// Runtime runs the handlers of its Kinds for the jobs of its Queues. For
// each queue it claims jobs, up to the queue's concurrency; it runs each
// attempt's handler, keeps the attempt's lease alive by heartbeats until its
// outcome is written, and writes outcomes fenced on the attempt, so a
// worker that lost a job cannot overwrite its new owner's result. It also
// enqueues its recurring tasks, deletes finished jobs after their retention,
// and keeps a row about itself in fila_workers for `fila stats` and the
// dashboard. Create one with New, start it with Run, and stop it with Stop.
type Runtime struct {
	// Its parts, each in a file of its own: producers claim (one per
	// queue, producer.go), the executor runs one attempt and maps its
	// result (executor.go), the completer owns every attempt from its claim
	// until its outcome is durable and keeps its lease alive meanwhile
	// (completer.go), and maintenance deletes old jobs and keeps the
	// worker's row in fila_workers (maintenance.go, registry.go).

	cfg       Config
	schema    string // of the tables the wake source follows: Config.Schema, or the one found at start
	log       *zap.Logger
	kinds     map[string]Kind
	kindNames []string
	limits    []claimer.KindLimit
	rates     []claimer.KindRate
	idKinds   []string // the kinds without a limit of either sort, which a claim by id may take
	rollup    *rollup  // what this worker did, written to fila_minutes

	pool        *pgxpool.Pool
	owns        bool // Fila opened pool and must close it
	control     *pgxpool.Pool
	ownsControl bool
	store       *claimer.Store
	readOnly    *readOnlyGuard // drops the pools' connections found on a read-only server
	// pingAfter is how long, in nanoseconds, a pooled connection may sit
	// idle before it is pinged on its next use (see shouldPing).
	pingAfter atomic.Int64

	source wakeSource // nil in ModePoll; built by Run
	// producers are the queues' producers, one per queue, replaced whole
	// (never changed in place) by AddQueue and RemoveQueue, so readers need
	// no lock; see producerList.
	producers atomic.Pointer[[]*producer]
	sweeper   *sweeper
	total     *semaphore.Weighted // MaxConcurrency across queues; nil without
	completer *completer
	registry  *registry
	events    *eventHub // Subscribe's subscriptions
	recurring *recurringSet
	// insertChain is Config.InsertMiddleware around the database insert:
	// how the recurring tasks' jobs are inserted, as a Client inserts.
	insertChain InsertFunc

	started      atomic.Bool
	opened       atomic.Bool // open succeeded: pools, store and source are set
	ready        chan struct{}
	done         chan struct{}
	claimingDone chan struct{}

	lastCtx      context.Context // see Run; set before the producers start
	claimTimeout time.Duration   // claimTimeoutDefault

	ctlMu        sync.Mutex // guards the fields below, which Run sets
	stopClaiming context.CancelFunc
	cancelWork   context.CancelCauseFunc
	workCtx      context.Context
	// jobValues is what every handler's context carries: the values of the
	// context Run was given, not its cancellation (see jobContext).
	jobValues     context.Context
	stopRequested bool // Stop was called; a Run not yet set up returns at once
	// claimGroup starts the goroutines of a queue added while running, on
	// claimGroupCtx (see AddQueue); nil before the producers start and
	// once claiming stopped.
	claimGroup    *errgroup.Group
	claimGroupCtx context.Context
	// draining are the producers RemoveQueue took out whose handlers still
	// run: Stats counts them.
	draining map[*producer]bool

	handlers sync.WaitGroup

	claimed, completed, failed, leaseLost, cancelled, released atomic.Uint64
	claimedByID, snoozed                                       atomic.Uint64
	completedSinceRetention                                    atomic.Int64
	cancelledNs                                                atomic.Int64 // when handlers were first cancelled, since monoBase
	closeInBackground                                          atomic.Bool  // see closePools
}

// New checks cfg and returns a Runtime; it connects nothing until Run.
func New(cfg Config) (*Runtime, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	r := &Runtime{
		cfg: cfg, log: cfg.Logger.Named("runtime"), kinds: map[string]Kind{},
		ready: make(chan struct{}), done: make(chan struct{}), claimingDone: make(chan struct{}),
		rollup: newRollup(), claimTimeout: claimTimeoutDefault, lastCtx: context.Background(),
		readOnly: newReadOnlyGuard(cfg.Logger.Named("runtime")), events: newEventHub(cfg.Logger.Named("runtime")),
	}
	r.cfg.Observer = observers{r.rollup, cfg.Observer}
	r.recurring = newRecurringSet(cfg.Recurring)
	r.insertChain = composeInsert(cfg.InsertMiddleware)
	for _, k := range cfg.Kinds {
		// Composed once, here: the hot path makes one call per layer.
		k.Handler = recovering(k.Handler)
		for i := len(cfg.Middleware) - 1; i >= 0; i-- {
			k.Handler = cfg.Middleware[i](k.Handler)
		}
		r.kinds[k.Name] = k
		r.kindNames = append(r.kindNames, k.Name)
		for _, a := range k.Aliases {
			// The same handler under the old name: claimed, run and
			// counted as a kind of its own.
			alias := k
			alias.Name, alias.Aliases = a, nil
			r.kinds[a] = alias
			r.kindNames = append(r.kindNames, a)
		}
		if k.Limit != nil {
			r.limits = append(r.limits, claimer.KindLimit{Kind: k.Name, Key: k.Limit.Key, Max: k.Limit.Max})
		}
		if k.RateLimit != nil {
			r.rates = append(r.rates, claimer.KindRate{Kind: k.Name, Key: k.RateLimit.Key, Max: k.RateLimit.Max, Period: k.RateLimit.Period})
		}
	}
	slices.Sort(r.kindNames)
	for _, k := range r.kindNames {
		if r.kinds[k].Limit == nil && r.kinds[k].RateLimit == nil {
			r.idKinds = append(r.idKinds, k)
		}
	}
	if cfg.MaxConcurrency > 0 {
		r.total = semaphore.NewWeighted(int64(cfg.MaxConcurrency))
	}
	var producers []*producer
	for _, q := range slices.Compact(slices.Clone(cfg.Queues)) {
		p, err := newProducer(r, q, cfg.concurrency(q))
		if err != nil {
			return nil, fmt.Errorf("config: queue %q: %w", q, err)
		}
		producers = append(producers, p)
	}
	r.producers.Store(&producers)
	var err error
	if r.sweeper, err = newSweeper(r); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// Build the wake source once here so a bad listener setting is refused
	// by New; Run builds it again with the database it must reach.
	r.schema = cfg.Schema
	if _, err := r.newSource(listener.Identity{}); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return r, nil
}

// newSource builds the wake source of the runtime's mode (nil in ModePoll).
func (r *Runtime) newSource(expect listener.Identity) (wakeSource, error) {
	switch r.cfg.Mode {
	case ModeNotify:
		return listener.New(listener.Config{DSN: r.cfg.ListenDSN, Queues: r.cfg.Queues, Schema: r.schema, Logger: r.cfg.Logger,
			PingInterval: r.cfg.ListenerPingInterval, PingTimeout: r.cfg.ListenerPingTimeout, Expect: expect})
	case ModeWAL:
		return listener.NewWAL(listener.WALConfig{DSN: r.cfg.ListenDSN, Queues: r.cfg.Queues, Schema: r.schema, Logger: r.cfg.Logger,
			Expect: expect})
	}
	return nil, nil
}

// Ready is closed once the runtime has claimed from every queue and its wake
// source listens: a job committed after Ready is picked up without waiting
// for a poll. Without a working wake source the runtime claims anyway, by
// polling, but Ready stays open.
func (r *Runtime) Ready() <-chan struct{} { return r.ready }

// Done is closed when Run has returned.
func (r *Runtime) Done() <-chan struct{} { return r.done }

// Stats returns counters since Run started.
func (r *Runtime) Stats() Stats {
	s := Stats{Claimed: r.claimed.Load(), ClaimedByID: r.claimedByID.Load(), Completed: r.completed.Load(), Failed: r.failed.Load(),
		LeaseLost: r.leaseLost.Load(), Cancelled: r.cancelled.Load(), Released: r.released.Load(),
		Snoozed: r.snoozed.Load(), ReadOnlyResets: r.readOnly.resets.Load()}
	for _, p := range r.producerList() {
		s.Running += int(p.running.Load())
	}
	r.ctlMu.Lock()
	src := r.source
	for p := range r.draining {
		s.Running += int(p.running.Load())
	}
	r.ctlMu.Unlock()
	if src != nil {
		s.Healthy = src.Healthy()
		s.Reconnects = src.Stats().Reconnects
	}
	return s
}

// Mode is the runtime's mode.
func (r *Runtime) Mode() Mode { return r.cfg.Mode }

// Queues are the queues the runtime works: Config.Queues, with those
// AddQueue added and without those RemoveQueue removed.
func (r *Runtime) Queues() []string {
	ps := r.producerList()
	qs := make([]string, len(ps))
	for i, p := range ps {
		qs[i] = p.queue
	}
	return qs
}

// producerList is the queues' producers now; never modify it.
func (r *Runtime) producerList() []*producer { return *r.producers.Load() }

// Kinds are the job kinds the runtime handles, sorted.
func (r *Runtime) Kinds() []string { return slices.Clone(r.kindNames) }

// ErrNotReady is wrapped by CheckReady's error.
var ErrNotReady = errors.New("fila: worker not ready")

// CheckReady says whether the runtime works as configured: it is running,
// the database answers within ctx, and its wake source is up (ModePoll has
// none). A worker whose wake source is down still claims, by polling, but
// picks jobs up late: report it not ready, for a readiness probe.
func (r *Runtime) CheckReady(ctx context.Context) error {
	select {
	case <-r.done:
		return fmt.Errorf("%w: stopped", ErrNotReady)
	case <-r.claimingDone:
		return fmt.Errorf("%w: stopping: it claims no more jobs", ErrNotReady)
	default:
	}
	if !r.opened.Load() {
		return fmt.Errorf("%w: not started", ErrNotReady)
	}
	r.ctlMu.Lock()
	src := r.source
	r.ctlMu.Unlock()
	if err := r.control.Ping(ctx); err != nil {
		return fmt.Errorf("%w: the database does not answer: %w", ErrNotReady, err)
	}
	if src != nil && !src.Healthy() {
		reason := src.Stats().LastError
		if reason == "" {
			reason = "not connected yet"
		}
		return fmt.Errorf("%w: the %s wake source is down: %s", ErrNotReady, r.cfg.Mode, reason)
	}
	return nil
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
// component unable to go on, joined with one wrapping ErrOutcomesNotWritten
// when it returned before every outcome was written (the database did not
// answer within HardStopGrace of the hard stop or of Stop's deadline, or
// handlers ignored their cancellation).
func (r *Runtime) Run(ctx context.Context) (err error) {
	if !r.started.CompareAndSwap(false, true) {
		return ErrClosed
	}
	defer close(r.done)
	// Last before Done: every outcome that will be written was, and its
	// event sent.
	defer r.events.close()
	claimCtx, stopClaiming := context.WithCancel(ctx)
	workCtx, cancelWorkCause := context.WithCancelCause(context.WithoutCancel(ctx))
	cancelWork := func(cause error) {
		r.cancelledNs.CompareAndSwap(0, int64(time.Since(monoBase)))
		cancelWorkCause(cause)
	}
	r.ctlMu.Lock()
	r.stopClaiming, r.cancelWork, r.workCtx, r.jobValues = stopClaiming, cancelWork, workCtx, context.WithoutCancel(ctx)
	stopped := r.stopRequested
	r.ctlMu.Unlock()
	defer stopClaiming()
	if stopped {
		// Stopped before it started (a signal handler that ran first): it
		// never claims, and connects nothing.
		stopClaiming()
		cancelWork(ErrShutdown)
		close(r.claimingDone)
		return nil
	}
	defer cancelWork(ErrShutdown)
	stopHard := context.AfterFunc(ctx, func() { cancelWork(ErrShutdown) })
	defer stopHard()
	// Statements that must not be cut short while the worker runs (a claim,
	// which may commit even if the client gives up on it) still end
	// HardStopGrace after handlers were cancelled: a database that does not
	// answer cannot hold a stop past its deadline.
	lastCtx, cancelLast := context.WithCancel(context.Background())
	defer cancelLast()
	r.lastCtx = lastCtx
	stopLast := context.AfterFunc(workCtx, func() {
		time.AfterFunc(time.Until(r.cancelledAt().Add(r.cfg.HardStopGrace)), cancelLast)
	})
	defer stopLast()

	if err := r.open(ctx); err != nil {
		close(r.claimingDone)
		return err
	}
	r.opened.Store(true)
	defer r.closePools()

	// Outcomes, heartbeats and the worker's row outlive claiming and
	// handlers: stopping never loses a result that is ready, and a lease is
	// kept until its attempt's outcome is durable.
	bgCtx, cancelBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBackground()
	r.completer = newCompleter(r)
	// Handlers' contexts are not children of workCtx (see jobContext):
	// cancelling work cancels each owned attempt's.
	stopHandlers := context.AfterFunc(workCtx, func() { r.completer.cancelAll(context.Cause(workCtx)) })
	defer stopHandlers()
	// The stop begins when claiming stops (Stop, or ctx done), not when
	// every component has returned: one may wait on a locked table until
	// the deadline, and an attempt whose lease deadline passes meanwhile
	// is one the stop leaves unwritten.
	markStop := context.AfterFunc(claimCtx, r.completer.stopBegan)
	defer markStop()
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); _ = r.completer.writer.Run(bgCtx) }()
	hbCtx, stopHeartbeats := context.WithCancel(bgCtx)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); r.completer.heartbeatLoop(hbCtx) }()

	// The producers claim first: the worker's row and the trigger check
	// need not hold up jobs already waiting (a worker restarting on a
	// backlog started its first claim some 25 ms later).
	g, gctx := errgroup.WithContext(claimCtx)
	firstClaims := make(chan struct{})
	var claimedOnce sync.WaitGroup
	// Under ctlMu: a queue AddQueue adds from now on is started by
	// AddQueue, one added before is in the list read here.
	r.ctlMu.Lock()
	r.claimGroup, r.claimGroupCtx = g, gctx
	for _, p := range r.producerList() {
		claimedOnce.Add(1)
		// A producer that stops before its first claim still counts, so
		// the goroutine waiting on claimedOnce always ends.
		var once sync.Once
		p.start(gctx, g.Go, func() { once.Do(claimedOnce.Done) })
	}
	r.ctlMu.Unlock()
	g.Go(func() error {
		// Counted by g until AddQueue can start no more goroutines in it,
		// so none is started after g.Wait returned.
		<-gctx.Done()
		r.ctlMu.Lock()
		r.claimGroup, r.claimGroupCtx = nil, nil
		r.ctlMu.Unlock()
		return nil
	})
	go func() { claimedOnce.Wait(); close(firstClaims) }()
	// Before the wake source starts: its health updates the same row. The
	// row is kept fresh, like outcomes and leases, until the end of the
	// stop: a draining worker is alive.
	r.registry.register(ctx, r.wakeState())
	aliveCtx, stopAlive := context.WithCancel(bgCtx)
	defer stopAlive()
	aliveDone := make(chan struct{})
	go func() { defer close(aliveDone); r.registry.aliveLoop(aliveCtx) }()
	r.warnIfTriggerOff(ctx)
	if r.source != nil {
		g.Go(func() error {
			// The source fails only when its DSN cannot serve it (a pooler in
			// the way, another database, a server without logical
			// replication): name the setting to change. Transient failures
			// it retries itself, while the producers poll.
			if err := r.source.Run(gctx); err != nil {
				return fmt.Errorf("ListenDSN: %w", err)
			}
			return nil
		})
		g.Go(func() error { r.watchHealth(gctx); return nil })
	}
	g.Go(func() error { return r.sweeper.poller.Run(gctx) })
	g.Go(func() error { return r.sweeper.run(gctx) })
	g.Go(func() error { r.markReady(gctx, firstClaims); return nil })
	g.Go(func() error { return r.maintenanceLoop(gctx) })
	g.Go(func() error { return r.schedulerLoop(gctx) })
	r.log.Info("runtime started", zap.Strings("queues", r.Queues()), zap.String("mode", string(r.cfg.Mode)),
		zap.Int("concurrency", r.cfg.Concurrency), zap.Int("max_concurrency", r.cfg.MaxConcurrency),
		zap.Duration("lease", r.cfg.Lease), zap.Strings("kinds", r.kindNames), zap.String("worker_id", r.registry.id))
	err = g.Wait()
	close(r.claimingDone)
	r.completer.stopBegan()
	if err != nil {
		r.log.Error("runtime stopping: a component cannot go on", zap.Error(err))
		cancelWork(ErrShutdown)
	}

	// What is left to write (releases, outcomes, the minute's counts, the
	// worker's row) gets until HardStopGrace after running handlers were
	// cancelled, by a hard stop or the shutdown deadline, or
	// cleanupTimeout if nothing cancelled them: a database that does not
	// answer cannot hold the process past the shutdown it was given.
	finalCtx, cancelFinal := context.WithTimeout(r.lastCtx, cleanupTimeout)
	defer cancelFinal()
	deaf := r.waitHandlers(workCtx)
	r.completer.releaseInterrupted(finalCtx)
	r.completer.close()
	select {
	case <-writerDone:
	case <-finalCtx.Done():
		cancelBackground()
		<-writerDone
	}
	stopHeartbeats()
	<-hbDone
	if deaf > 0 {
		r.log.Error("handlers ignored cancellation; their jobs run again once their leases expire",
			zap.Int64s("job_ids", r.completer.ownedIDs()))
	}
	r.flushMinutes(finalCtx)
	stopAlive()
	<-aliveDone
	r.registry.remove(finalCtx)
	s := r.Stats()
	r.log.Info("runtime stopped", zap.Uint64("claimed", s.Claimed), zap.Uint64("completed", s.Completed),
		zap.Uint64("failed", s.Failed), zap.Uint64("released", s.Released))
	if ids := r.completer.unsettled(); len(ids) > 0 {
		what := fmt.Sprintf("%d jobs", len(ids))
		if len(ids) == 1 {
			what = "1 job"
		}
		lost := fmt.Errorf("%w: %s; they run again once their leases expire", ErrOutcomesNotWritten, what)
		r.log.Error("stopped with outcomes not written", zap.Int("jobs", len(ids)), zap.Int64s("job_ids", ids))
		err = errors.Join(err, lost)
	}
	if finalCtx.Err() != nil {
		// The database did not answer by the end of the stop: closing the
		// pools would wait on it too (a cancel request per connection whose
		// statement was cut short, up to 15 s each in pgxpool).
		r.closeInBackground.Store(true)
	}
	return err
}

// cleanupTimeout bounds what Run writes after its handlers returned, when
// no deadline cancelled them: the outcome writer retries a database that
// does not answer for this long.
const cleanupTimeout = 30 * time.Second

// ErrOutcomesNotWritten is wrapped by Run's error when it returned before
// the outcomes (or releases) of some attempts were written: the database
// did not answer by the end of the shutdown, or handlers ignored their
// cancellation. Those jobs run again once their leases expire.
var ErrOutcomesNotWritten = errors.New("fila: stopped before every outcome was written")

// cancelledAt is when running handlers were first cancelled (now if never).
func (r *Runtime) cancelledAt() time.Time {
	if ns := r.cancelledNs.Load(); ns != 0 {
		return monoBase.Add(time.Duration(ns))
	}
	return time.Now()
}

// markReady closes Ready once every producer claimed and the wake source
// listens (LISTEN first, then scan: the source wakes every queue when it
// connects, so nothing committed in between is missed).
func (r *Runtime) markReady(ctx context.Context, firstClaims <-chan struct{}) {
	select {
	case <-firstClaims:
	case <-ctx.Done():
		return
	}
	if r.source != nil {
		select {
		case <-r.source.Ready():
		case <-ctx.Done():
			return
		}
	}
	close(r.ready)
}

// watchHealth passes the wake source's health to every producer's poller
// (fast polls while it is down) and to the worker's row in fila_workers.
// While the source is down it looks again every second, so the row says
// why it is down once the first attempt to connect has failed.
func (r *Runtime) watchHealth(ctx context.Context) {
	last := ""
	recheck := time.NewTicker(time.Second)
	defer recheck.Stop()
	for {
		healthy := r.source.Healthy()
		r.sweeper.poller.SetHealthy(healthy)
		for _, p := range r.producerList() {
			p.poller.SetHealthy(healthy)
		}
		if st := r.wakeState(); st.key() != last {
			last = st.key()
			r.registry.update(ctx, st)
		}
		var down <-chan time.Time
		if !healthy {
			down = recheck.C
		}
		select {
		case <-ctx.Done():
			return
		case <-r.source.HealthChanges():
		case <-down:
		}
	}
}

// Stop stops claiming and waits for running handlers until ctx expires, then
// cancels them (their jobs go back to pending at once) and waits for Run to
// return; once ctx expires, what is left to write gets HardStopGrace more,
// whether or not handlers were still running, so a database that does not
// answer cannot hold a stop past its deadline and that grace. It returns
// ctx.Err() if handlers had to be cancelled. Called
// before Run, it makes Run return nil at once, without connecting: a
// shutdown that comes before the start is not lost.
func (r *Runtime) Stop(ctx context.Context) error {
	r.ctlMu.Lock()
	r.stopRequested = true
	stopClaiming, cancelWork := r.stopClaiming, r.cancelWork
	r.ctlMu.Unlock()
	if stopClaiming == nil {
		// Run has not set itself up: it sees the request when it does.
		return nil
	}
	stopClaiming()
	var err error
	select {
	case <-r.done:
		return nil
	case <-r.handlersIdleAfterClaiming():
		// What is left to write must not outlast the deadline either: at
		// the deadline, Run gives it HardStopGrace more, as after
		// cancelling handlers.
		select {
		case <-r.done:
			return nil
		case <-ctx.Done():
			cancelWork(ErrShutdown)
		}
	case <-ctx.Done():
		err = ctx.Err()
		if running := r.Stats().Running; running > 0 {
			r.log.Warn("shutdown deadline passed; cancelling running handlers", zap.Int("running", running))
		}
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

// waitHandlers waits for running handlers; once work is cancelled it waits at
// most HardStopGrace for handlers that ignore their context, and returns how
// many it gave up on.
func (r *Runtime) waitHandlers(workCtx context.Context) int {
	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-workCtx.Done():
	}
	select {
	case <-done:
		return 0
	case <-time.After(r.cfg.HardStopGrace):
		return r.Stats().Running
	}
}
