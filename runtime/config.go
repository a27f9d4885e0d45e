package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/listener"
)

// Mode selects how workers learn that there is work.
type Mode string

const (
	// ModeNotify wakes claimers from LISTEN on a dedicated connection, with a
	// slow safety poll. The default.
	ModeNotify Mode = "notify"
	// ModePoll polls with an idle backoff and holds no dedicated connection.
	ModePoll Mode = "poll"
	// ModeWAL wakes claimers from logical replication of inserts into
	// fila_jobs: producers' commits take no NOTIFY lock.
	ModeWAL Mode = "wal"
)

// Defaults and limits of Config.
const (
	// LimitMaxMax is the largest Limit.Max: the claim sends it to PostgreSQL
	// as an int4.
	LimitMaxMax = math.MaxInt32
	// RatePeriodMin and RatePeriodMax bound RateLimit.Period.
	RatePeriodMin = time.Millisecond
	RatePeriodMax = 30 * 24 * time.Hour
	// RetryMaxMax is the largest RetryMax: a month. The backoff doubles
	// RetryBase up to RetryMax, which must stay far from a time.Duration's
	// limit.
	RetryMaxMax = 30 * 24 * time.Hour

	ConcurrencyDefault   = 20
	ConcurrencyMax       = 10000
	LeaseDefault         = 30 * time.Second
	LeaseMin             = 500 * time.Millisecond
	LeaseMax             = time.Hour
	ClaimBatchDefault    = 1000
	ClaimBatchMax        = 10000
	BusyRateDefault      = 200
	RetryBaseDefault     = time.Second
	RetryMaxDefault      = time.Hour
	RetentionDefault     = 24 * time.Hour
	DeadRetentionDefault = 7 * 24 * time.Hour
	HardStopGraceDefault = 5 * time.Second
	// LivenessIntervalDefault, Min and Max bound Config.LivenessInterval.
	LivenessIntervalDefault = 5 * time.Second
	LivenessIntervalMin     = time.Second
	LivenessIntervalMax     = 5 * time.Minute
	// LivenessMissed is how many liveness heartbeats a worker may miss
	// before every view counts it gone (fila_worker_live in the schema).
	LivenessMissed       = 3
	SafetyPollDefault    = fallbackpoll.SafetyPollDefault
	SafetyPollMin        = fallbackpoll.SafetyPollMin
	SafetyPollMax        = fallbackpoll.SafetyPollMax
	UnhealthyPollDefault = fallbackpoll.UnhealthyPollDefault
	UnhealthyPollMin     = fallbackpoll.UnhealthyPollMin
	PollMinDefault       = fallbackpoll.PollMinDefault
	PollMinMin           = fallbackpoll.PollMinMin
	PollMinMax           = fallbackpoll.PollMinMax
	PollMaxDefault       = fallbackpoll.PollMaxDefault
)

// Handler runs one attempt of a job. Returning nil completes the job; an
// error schedules a retry with backoff (or marks the job dead once its
// attempts are spent); an error wrapped with Permanent marks it dead at once.
// A panic is recovered and recorded like an error. ctx is cancelled when the
// kind's timeout passes, when the worker lost the job's lease, and at a hard
// stop.
type Handler func(ctx context.Context, job *Job) error

// Kind registers a handler for one job kind.
type Kind struct {
	// Name is the value of fila_jobs.kind this handler runs (see
	// ValidateKind). Required.
	Name string
	// Handler runs each attempt of a job of this kind. Required.
	Handler Handler
	// Timeout cancels the handler's context after this long; not negative.
	// Defaults to 0: no timeout of its own (the lease is kept alive by
	// heartbeats).
	Timeout time.Duration
	// Limit, if set, caps how many jobs of this kind run at once per
	// concurrency key, across every worker. Defaults to none.
	Limit *Limit
	// RateLimit, if set, caps how many jobs of this kind start per period
	// per rate key, across every worker; it holds together with Limit.
	// Defaults to none.
	RateLimit *RateLimit
	// Backoff, if set, is this kind's retry policy: how long after its
	// failed attempt (1 for the first) a job runs again. A handler's
	// RetryAfter still wins. Defaults to nil: Config.RetryBase·2^(attempt-1),
	// jittered, capped at Config.RetryMax.
	Backoff func(attempt int) time.Duration
	// Aliases are other names this handler also runs jobs of: a kind
	// being renamed keeps its old name here while jobs inserted under it
	// remain (Job.Kind says which name a job has). Each is a kind name of
	// its own (ValidateKind) that no other kind or alias uses. Not with
	// Limit or RateLimit: each name would count its own slots. Defaults to
	// none.
	Aliases []string
}

// Middleware wraps a handler: it sees the job and the context before next
// runs, and the error next returned (the attempt's outcome: nil, a failure,
// Snooze, RetryAfter…) after; it may add to the context, or return another
// error. Config.Middleware applies to every kind, --exec commands included.
type Middleware func(next Handler) Handler

// Limit caps the running jobs of a kind per concurrency key, across every
// worker: at most Max jobs with the same key run at once; the others wait,
// pending, and start as soon as a slot frees (a crashed worker's slot frees
// when its lease expires). Every worker that handles the kind must declare
// the same Limit.
type Limit struct {
	// Max is how many jobs of one key may run at once. Allowed 1 to
	// LimitMaxMax. Required.
	Max int
	// Key is a dotted path into the payload whose value is the concurrency
	// key, such as "account_id" or "account.id": jobs with equal values
	// share the Max slots. Jobs whose payload lacks it share the key "".
	// Defaults to "": one key for the whole kind.
	Key string
}

// RateLimit caps the starts of a kind per rate key, across every worker:
// in any window of Period, at most Max jobs with the same key start; the
// others wait, pending, and start as soon as the window allows (the
// worker sets a timer for it: nothing polls). Every start counts, a
// crashed worker's and a retried attempt's included, for Period and no
// longer. Every worker that handles the kind must declare the same
// RateLimit.
type RateLimit struct {
	// Max is how many jobs of one key may start per Period. Allowed 1 to
	// LimitMaxMax. Required.
	Max int
	// Period is the window the starts are counted in. Allowed
	// RatePeriodMin to RatePeriodMax. Required.
	Period time.Duration
	// Key is a dotted path into the payload whose value is the rate key,
	// such as "account_id" or "account.id": jobs with equal values share
	// the Max starts. Jobs whose payload lacks it share the key "".
	// Defaults to "": one key for the whole kind.
	Key string
}

// Config configures a Runtime. The zero value of every field but DSN (or
// Pool) and Kinds is usable.
type Config struct {
	// DSN is the main connection string. It may point at PgBouncer in
	// transaction mode: Fila keeps no session state there and uses no named
	// prepared statements. Required unless Pool is set.
	DSN string
	// ListenDSN is the dedicated listener's connection string; it must reach
	// PostgreSQL directly, and the same database as DSN (or Pool): Run
	// checks. Defaults to DSN, or to Pool's connection string.
	ListenDSN string
	// Pool, if set, is used instead of opening one from DSN; Fila does not
	// close it. Handlers may share it and hold all its connections: Fila's
	// own statements run on a small pool (4 connections) it opens from
	// Pool's configuration, so heartbeats and outcomes never wait behind
	// handlers. Defaults to none: a pool opened from DSN.
	Pool *pgxpool.Pool
	// Schema is the schema of Fila's tables, for applications that share a
	// database, each with its own schema (fila migrate --schema,
	// migrations.MigrateIn). It changes three things: the connections Fila
	// opens from DSN (and its own pool beside a Pool) have it as their
	// search_path, alone; the listener hears only the notifications of its
	// triggers (channels "fila:"+Schema+":"+queue), so another schema's
	// inserts wake none of this runtime's claimers; and in ModeWAL the
	// source streams the schema's own publication. A Pool must reach the
	// schema's tables through its own search_path (UseSchema sets it):
	// Run refuses one that finds another fila_jobs. Through PgBouncer, the
	// search_path startup parameter must be tracked (PgBouncer 1.20 or
	// later, track_extra_parameters), not ignored. ASCII letters, digits and
	// '_', at most 45 bytes, not starting with a digit or pg_.
	// Defaults to "": the tables the connections' search_path finds, whose
	// channels are the schema public's unless they are in another.
	Schema string
	// Queues are the queues this runtime works. Defaults to ["default"].
	Queues []string
	// Kinds are the job kinds this runtime handles, each once. A claim
	// takes only jobs of these kinds: other workers on the same queue may
	// handle other kinds. Required.
	Kinds []Kind
	// Middleware wraps every kind's handler, the first outermost: for
	// tracing, metrics, logging or a context value every handler needs.
	// Defaults to none.
	Middleware []Middleware
	// Concurrency is how many handlers of each queue run at once; each queue
	// has its own, so a busy queue never starves another. Allowed 1 to
	// ConcurrencyMax. Defaults to ConcurrencyDefault.
	Concurrency int
	// QueueConcurrency sets the concurrency of individual queues (of
	// Queues), instead of Concurrency; each allowed 1 to ConcurrencyMax.
	// Defaults to none.
	QueueConcurrency map[string]int
	// MaxConcurrency, if set, caps the handlers running at once across all
	// queues; queues waiting for a slot get one in turn. Allowed 0 to
	// ConcurrencyMax for each queue. Defaults to 0: no cap beyond each
	// queue's own.
	MaxConcurrency int
	// Mode is how workers learn of new jobs. Defaults to ModeNotify.
	Mode Mode
	// Lease is how long a claimed job stays this worker's without a
	// heartbeat; a crashed worker's job runs again after at most this long.
	// A worker that cannot renew a lease (cut off from the database, or its
	// heartbeats finding the row locked) stops the handler at five sixths
	// of the lease after the last renewal was sent, before another worker
	// may rescue the job (see Job.OwnedUntil). Allowed LeaseMin to
	// LeaseMax. Defaults to LeaseDefault.
	Lease time.Duration
	// ListenerPingInterval is how long the listener's connection (ModeNotify)
	// may stay silent before it is checked: a connection that went half-open
	// is found within ListenerPingInterval + ListenerPingTimeout, and the
	// poll runs at UnhealthyPoll until the listener is back. Allowed
	// listener.PingIntervalMin to listener.PingIntervalMax. Defaults to
	// listener.PingIntervalDefault.
	ListenerPingInterval time.Duration
	// ListenerPingTimeout bounds each check of the listener's connection and
	// each statement it runs to set up. Allowed listener.PingTimeoutMin to
	// listener.PingTimeoutMax. Defaults to listener.PingTimeoutDefault.
	ListenerPingTimeout time.Duration
	// HeartbeatInterval is how often leases of running jobs are extended,
	// counted for each attempt from the last renewal; a heartbeat that fails
	// is tried again after a quarter of it. The first heartbeat of an
	// attempt comes 200 ms after its claim, if its handler still runs.
	// Allowed above 0 to Lease/2. Defaults to Lease/3.
	HeartbeatInterval time.Duration
	// SafetyPoll is how often a worker claims without having been woken,
	// while its wake source is healthy: it catches a notification that was
	// lost. Allowed SafetyPollMin to SafetyPollMax. Defaults to
	// SafetyPollDefault.
	SafetyPoll time.Duration
	// UnhealthyPoll is the poll interval while the wake source is down or
	// not yet up. Allowed UnhealthyPollMin to SafetyPoll. Defaults to
	// UnhealthyPollDefault.
	UnhealthyPoll time.Duration
	// PollMin is ModePoll's interval while work flows. Allowed PollMinMin
	// (1ms) to PollMinMax (1m). Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps ModePoll's idle backoff. Allowed PollMin to
	// SafetyPollMax. Defaults to PollMaxDefault, or PollMin if greater.
	PollMax time.Duration
	// BusyRate is, in ModeNotify, how many jobs a second a queue's
	// notifications must bring before this worker stops waiting for them and
	// polls the queue instead, until it runs dry. Producers notify a queue
	// only while some worker waits for notifications on it, and a notifying
	// commit takes an instance-wide lock: under load, they then commit
	// without it. A negative value always waits for notifications
	// (producers always notify). Defaults to BusyRateDefault.
	BusyRate int
	// ClaimBatch caps the jobs one claim statement takes. Allowed 1 to
	// ClaimBatchMax. Defaults to ClaimBatchDefault.
	ClaimBatch int
	// RetryBase is the first retry's backoff: a failed attempt n waits
	// RetryBase·2^(n-1), jittered, capped at RetryMax. Allowed above 0 to
	// RetryMax. Defaults to RetryBaseDefault.
	RetryBase time.Duration
	// RetryMax caps the retry backoff. Allowed RetryBase to RetryMaxMax.
	// Defaults to RetryMaxDefault.
	RetryMax time.Duration
	// Retention is how long completed jobs are kept before being deleted in
	// small batches; a negative value keeps them. Defaults to
	// RetentionDefault.
	Retention time.Duration
	// DeadRetention is how long dead and cancelled jobs are kept, so there
	// is time to look at them and retry them; a negative value keeps them.
	// Defaults to DeadRetentionDefault.
	DeadRetention time.Duration
	// HardStopGrace is how long a hard stop (or the passing of Stop's
	// deadline) waits for cancelled handlers to return and for what is left
	// to write: outcomes, the release of interrupted jobs. A handler still
	// running then is abandoned, and an outcome not written is given up: Run
	// returns (with an error wrapping ErrOutcomesNotWritten), those leases
	// are no longer renewed, and after they expire another worker runs the
	// jobs, so a process should exit once Run returns. Not negative.
	// Defaults to HardStopGraceDefault.
	HardStopGrace time.Duration
	// LivenessInterval is how often the worker refreshes its row in
	// fila_workers (one UPDATE of that row). A worker that missed
	// LivenessMissed of them counts as gone in `fila stats`, the
	// dashboard, the metrics and `fila migrate`'s check for live workers,
	// and its kinds and recurring tasks as served by no one: a worker
	// killed without a clean stop drops out of them three intervals after
	// its last refresh, so between two and three after it died. Allowed LivenessIntervalMin to
	// LivenessIntervalMax. Defaults to LivenessIntervalDefault.
	LivenessInterval time.Duration
	// Recurring are tasks this worker schedules: each enqueues a job at
	// every slot of its schedule. Any number of workers may declare the same
	// task; exactly one job is enqueued per slot. AddRecurring and
	// RemoveRecurring change them while the runtime runs. Defaults to none.
	Recurring []RecurringTask
	// InsertMiddleware wraps the inserts of the recurring tasks' jobs, the
	// first outermost, as a Client's wraps its inserts: give it the
	// middleware of your Client, so that a job enqueued on a schedule is
	// traced or stamped like one inserted by hand. It runs inside the
	// transaction that claims the slot, whose lock other workers wait on:
	// keep it quick. Defaults to none.
	InsertMiddleware []InsertMiddleware
	// ErrorHandler, if set, is told of every failed attempt, with the
	// panic's value and stack for a handler that panicked, and may make the
	// job dead at once (see ErrorHandler). Defaults to none.
	ErrorHandler ErrorHandler
	// StuckAfter, if set, is how long an attempt's handler may run before
	// it counts as stuck: the runtime then logs a warning and calls
	// StuckJobHandler, once per attempt. The handler is not stopped. Not
	// negative. Defaults to 0: no attempt counts as stuck.
	StuckAfter time.Duration
	// StuckJobHandler, if set, is called once for each attempt whose
	// handler has run StuckAfter; it requires StuckAfter. Defaults to none.
	StuckJobHandler StuckJobHandler
	// Observer, if set, is told of every wake-up, claim and outcome (see
	// package metrics). Defaults to none.
	Observer Observer
	// Logger receives the runtime's logs. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ListenDSN == "" {
		c.ListenDSN = c.DSN
	}
	if c.ListenDSN == "" && c.Pool != nil {
		// The pool's own connection string: the wake source must reach the
		// same database (it checks), directly.
		c.ListenDSN = c.Pool.Config().ConnString()
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{"default"}
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.Mode == "" {
		c.Mode = ModeNotify
	}
	if c.Lease == 0 {
		c.Lease = LeaseDefault
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.ListenerPingInterval == 0 {
		c.ListenerPingInterval = listener.PingIntervalDefault
	}
	if c.ListenerPingTimeout == 0 {
		c.ListenerPingTimeout = listener.PingTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.SafetyPoll == 0 {
		c.SafetyPoll = SafetyPollDefault
	}
	if c.UnhealthyPoll == 0 {
		c.UnhealthyPoll = UnhealthyPollDefault
	}
	if c.PollMin == 0 {
		c.PollMin = PollMinDefault
	}
	if c.PollMax == 0 {
		c.PollMax = max(PollMaxDefault, c.PollMin)
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = ClaimBatchDefault
	}
	if c.BusyRate == 0 {
		c.BusyRate = BusyRateDefault
	}
	if c.RetryBase == 0 {
		c.RetryBase = RetryBaseDefault
	}
	if c.RetryMax == 0 {
		c.RetryMax = RetryMaxDefault
	}
	if c.Retention == 0 {
		c.Retention = RetentionDefault
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = DeadRetentionDefault
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = LivenessIntervalDefault
	}
	if c.HardStopGrace == 0 {
		c.HardStopGrace = HardStopGraceDefault
	}
	return c
}

// Validate returns an error naming the first field out of range.
func (c Config) Validate() error {
	if c.DSN == "" && c.Pool == nil {
		return errors.New("DSN is empty and no Pool is set: give the database to work")
	}
	if c.Mode != ModePoll && c.ListenDSN == "" {
		return fmt.Errorf("ListenDSN is empty: mode %q needs a direct connection (or use mode %q)", c.Mode, ModePoll)
	}
	switch c.Mode {
	case ModeNotify, ModePoll, ModeWAL:
	default:
		return fmt.Errorf("Mode %q is unknown: use %q, %q or %q", c.Mode, ModeNotify, ModePoll, ModeWAL)
	}
	if c.Schema != "" {
		if err := channel.ValidateSchema(c.Schema); err != nil {
			return fmt.Errorf("Schema: %w", err)
		}
	}
	for _, q := range c.Queues {
		if _, err := channel.ForQueueIn(c.Schema, q); err != nil {
			return fmt.Errorf("Queues: %w", err)
		}
	}
	if len(c.Kinds) == 0 {
		return errors.New("Kinds is empty: register at least one handler")
	}
	for i, m := range c.Middleware {
		if m == nil {
			return fmt.Errorf("Middleware[%d] is nil", i)
		}
	}
	for i, m := range c.InsertMiddleware {
		if m == nil {
			return fmt.Errorf("InsertMiddleware[%d] is nil", i)
		}
	}
	seen := map[string]bool{}
	for _, k := range c.Kinds {
		if err := ValidateKind(k.Name); err != nil {
			return fmt.Errorf("Kinds: %w", err)
		}
		if k.Handler == nil {
			return fmt.Errorf("Kinds: kind %q has no Handler", k.Name)
		}
		if seen[k.Name] {
			return fmt.Errorf("Kinds: kind %q is registered twice", k.Name)
		}
		if k.Timeout < 0 {
			return fmt.Errorf("Kinds: kind %q has a negative Timeout", k.Name)
		}
		if k.Limit != nil {
			if k.Limit.Max < 1 || k.Limit.Max > LimitMaxMax {
				return fmt.Errorf("Kinds: kind %q has Limit.Max %d out of range: allowed 1 to %d", k.Name, k.Limit.Max, LimitMaxMax)
			}
			if k.Limit.Key != "" && slices.Contains(strings.Split(k.Limit.Key, "."), "") {
				return fmt.Errorf("Kinds: kind %q has Limit.Key %q; want a dotted path such as account.id", k.Name, k.Limit.Key)
			}
		}
		if r := k.RateLimit; r != nil {
			if r.Max < 1 || r.Max > LimitMaxMax {
				return fmt.Errorf("Kinds: kind %q has RateLimit.Max %d out of range: allowed 1 to %d", k.Name, r.Max, LimitMaxMax)
			}
			if r.Period < RatePeriodMin || r.Period > RatePeriodMax {
				return fmt.Errorf("Kinds: kind %q has RateLimit.Period %s out of range: allowed %s to %s", k.Name, r.Period, RatePeriodMin, RatePeriodMax)
			}
			if r.Key != "" && slices.Contains(strings.Split(r.Key, "."), "") {
				return fmt.Errorf("Kinds: kind %q has RateLimit.Key %q; want a dotted path such as account.id", k.Name, r.Key)
			}
		}
		seen[k.Name] = true
		if len(k.Aliases) > 0 && (k.Limit != nil || k.RateLimit != nil) {
			return fmt.Errorf("Kinds: kind %q has Aliases and a Limit or RateLimit: each name would count its own slots", k.Name)
		}
		for _, a := range k.Aliases {
			if err := ValidateKind(a); err != nil {
				return fmt.Errorf("Kinds: kind %q: alias: %w", k.Name, err)
			}
			if seen[a] {
				return fmt.Errorf("Kinds: kind %q: alias %q is registered twice", k.Name, a)
			}
			seen[a] = true
		}
	}
	names := map[string]bool{}
	for _, t := range c.Recurring {
		if _, _, err := t.validate(); err != nil {
			return fmt.Errorf("Recurring: %w", err)
		}
		if names[t.Name] {
			return fmt.Errorf("Recurring: task %q is declared twice", t.Name)
		}
		names[t.Name] = true
	}
	if c.Concurrency < 1 || c.Concurrency > ConcurrencyMax {
		return fmt.Errorf("Concurrency %d out of range: allowed 1 to %d", c.Concurrency, ConcurrencyMax)
	}
	for q, n := range c.QueueConcurrency {
		if !slices.Contains(c.Queues, q) {
			return fmt.Errorf("QueueConcurrency: queue %q is not one of Queues %v", q, c.Queues)
		}
		if n < 1 || n > ConcurrencyMax {
			return fmt.Errorf("QueueConcurrency: queue %q has %d, out of range: allowed 1 to %d", q, n, ConcurrencyMax)
		}
	}
	if c.MaxConcurrency < 0 || c.MaxConcurrency > ConcurrencyMax*len(c.Queues) {
		return fmt.Errorf("MaxConcurrency %d out of range: allowed 0 (no cap) to %d", c.MaxConcurrency, ConcurrencyMax*len(c.Queues))
	}
	if c.Lease < LeaseMin || c.Lease > LeaseMax {
		return fmt.Errorf("Lease %s out of range: allowed %s to %s", c.Lease, LeaseMin, LeaseMax)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.Lease/2 {
		return fmt.Errorf("HeartbeatInterval %s out of range: allowed up to half the Lease (%s)", c.HeartbeatInterval, c.Lease/2)
	}
	if c.ListenerPingInterval < listener.PingIntervalMin || c.ListenerPingInterval > listener.PingIntervalMax {
		return fmt.Errorf("ListenerPingInterval %s out of range: allowed %s to %s",
			c.ListenerPingInterval, listener.PingIntervalMin, listener.PingIntervalMax)
	}
	if c.ListenerPingTimeout < listener.PingTimeoutMin || c.ListenerPingTimeout > listener.PingTimeoutMax {
		return fmt.Errorf("ListenerPingTimeout %s out of range: allowed %s to %s",
			c.ListenerPingTimeout, listener.PingTimeoutMin, listener.PingTimeoutMax)
	}
	if err := c.pollConfig("").Validate(); err != nil {
		return err
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > ClaimBatchMax {
		return fmt.Errorf("ClaimBatch %d out of range: allowed 1 to %d", c.ClaimBatch, ClaimBatchMax)
	}
	if c.RetryBase <= 0 || c.RetryBase > c.RetryMax {
		return fmt.Errorf("RetryBase %s out of range: allowed above 0 to RetryMax (%s)", c.RetryBase, c.RetryMax)
	}
	if c.RetryMax > RetryMaxMax {
		return fmt.Errorf("RetryMax %s out of range: allowed RetryBase (%s) to %s", c.RetryMax, c.RetryBase, RetryMaxMax)
	}
	if c.LivenessInterval < LivenessIntervalMin || c.LivenessInterval > LivenessIntervalMax {
		return fmt.Errorf("LivenessInterval %s out of range: allowed %s to %s", c.LivenessInterval, LivenessIntervalMin, LivenessIntervalMax)
	}
	if c.HardStopGrace < 0 {
		return fmt.Errorf("HardStopGrace %s is negative: allowed above 0", c.HardStopGrace)
	}
	if c.StuckAfter < 0 {
		return fmt.Errorf("StuckAfter %s is negative: allowed 0 (never stuck) or above", c.StuckAfter)
	}
	if c.StuckJobHandler != nil && c.StuckAfter == 0 {
		return errors.New("StuckJobHandler is set but StuckAfter is 0: set how long a handler may run before it counts as stuck")
	}
	return nil
}

// concurrency is queue's own concurrency.
func (c Config) concurrency(queue string) int {
	if n, ok := c.QueueConcurrency[queue]; ok {
		return n
	}
	return c.Concurrency
}

// pollConfig is the poller configuration of one queue's producer, which
// keeps only its due timer (queue set), or of the sweeper, which polls for
// every queue (queue "").
func (c Config) pollConfig(queue string) fallbackpoll.Config {
	log := c.Logger
	if queue != "" {
		log = log.With(zap.String("queue", queue))
	}
	return fallbackpoll.Config{
		PurePoll: c.Mode == ModePoll, SafetyPoll: c.SafetyPoll, UnhealthyPoll: c.UnhealthyPoll,
		PollMin: c.PollMin, PollMax: c.PollMax, Logger: log, TimerOnly: queue != "",
	}
}

// KindMaxLen is the longest kind name, in bytes (the table's rule).
const KindMaxLen = 200

// ValidateKind returns an error naming the problem when name cannot be a job
// kind: empty, longer than KindMaxLen bytes, not UTF-8, starting or ending
// with a blank, or holding a control character such as a tab.
func ValidateKind(name string) error {
	switch {
	case name == "":
		return errors.New("job kind is empty")
	case len(name) > KindMaxLen:
		return fmt.Errorf("job kind %q… is %d bytes; at most %d", truncateRunes(name, 40), len(name), KindMaxLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("job kind %q is not valid UTF-8", name)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("job kind %q starts or ends with a blank", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("job kind %q holds a control character (a tab, a newline…)", name)
	}
	return nil
}

// truncateRunes cuts s to at most n bytes on a rune boundary.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
