package runtime

import (
	"context"
	"errors"
	"fmt"
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
	// Name is the value of fila_jobs.kind this handler runs.
	Name    string
	Handler Handler
	// Timeout cancels the handler's context after this long. Defaults to 0:
	// no timeout of its own (the lease is kept alive by heartbeats).
	Timeout time.Duration
	// Limit, if set, caps how many jobs of this kind run at once per
	// concurrency key, across every worker. Defaults to none.
	Limit *Limit
}

// Limit caps the running jobs of a kind per concurrency key, across every
// worker: at most Max jobs with the same key run at once; the others wait,
// pending, and start as soon as a slot frees (a crashed worker's slot frees
// when its lease expires). Every worker that handles the kind must declare
// the same Limit.
type Limit struct {
	// Max is how many jobs of one key may run at once. Required, at least 1.
	Max int
	// Key is a dotted path into the payload whose value is the concurrency
	// key, such as "account_id" or "account.id": jobs with equal values
	// share the Max slots. Jobs whose payload lacks it share the key "".
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
	// handlers.
	Pool *pgxpool.Pool
	// Queues are the queues this runtime works. Defaults to ["default"].
	Queues []string
	// Kinds are the job kinds this runtime handles. Required. A claim takes
	// only jobs of these kinds: other workers on the same queue may handle
	// other kinds.
	Kinds []Kind
	// Concurrency is how many handlers of each queue run at once; each queue
	// has its own, so a busy queue never starves another. Defaults to
	// ConcurrencyDefault; allowed 1 to ConcurrencyMax.
	Concurrency int
	// QueueConcurrency sets the concurrency of individual queues (of
	// Queues), instead of Concurrency. Defaults to none.
	QueueConcurrency map[string]int
	// MaxConcurrency, if set, caps the handlers running at once across all
	// queues; queues waiting for a slot get one in turn. Defaults to 0: no
	// cap beyond each queue's own.
	MaxConcurrency int
	// Mode is how workers learn of new jobs. Defaults to ModeNotify.
	Mode Mode
	// Lease is how long a claimed job stays this worker's without a
	// heartbeat; a crashed worker's job runs again after at most this long.
	// Defaults to LeaseDefault; allowed LeaseMin to LeaseMax.
	Lease time.Duration
	// ListenerPingInterval is how long the listener's connection (ModeNotify)
	// may stay silent before it is checked: a connection that went half-open
	// is found within ListenerPingInterval + ListenerPingTimeout, and the
	// poll runs at Poll.UnhealthyPoll until the listener is back. Defaults to
	// listener.PingIntervalDefault; allowed listener.PingIntervalMin to
	// listener.PingIntervalMax.
	ListenerPingInterval time.Duration
	// ListenerPingTimeout bounds each check of the listener's connection and
	// each statement it runs to set up. Defaults to
	// listener.PingTimeoutDefault; allowed listener.PingTimeoutMin to
	// listener.PingTimeoutMax.
	ListenerPingTimeout time.Duration
	// HeartbeatInterval is how often leases of running jobs are extended.
	// Defaults to Lease/3.
	HeartbeatInterval time.Duration
	// SafetyPoll is how often a worker claims without having been woken,
	// while its wake source is healthy: it catches a notification that was
	// lost. Defaults to SafetyPollDefault; allowed SafetyPollMin to
	// SafetyPollMax.
	SafetyPoll time.Duration
	// UnhealthyPoll is the poll interval while the wake source is down or
	// not yet up. Defaults to UnhealthyPollDefault; allowed UnhealthyPollMin to
	// SafetyPoll.
	UnhealthyPoll time.Duration
	// PollMin is ModePoll's interval while work flows. Defaults to
	// PollMinDefault; allowed PollMinMin (1ms) to PollMinMax (1m).
	PollMin time.Duration
	// PollMax caps ModePoll's idle backoff. Defaults to PollMaxDefault;
	// allowed PollMin to SafetyPollMax.
	PollMax time.Duration
	// BusyRate is, in ModeNotify, how many jobs a second a queue's
	// notifications must bring before this worker stops waiting for them and
	// polls the queue instead, until it runs dry. Producers notify a queue
	// only while some worker waits for notifications on it, and a notifying
	// commit takes an instance-wide lock: under load, they then commit
	// without it. Defaults to BusyRateDefault; negative: always wait for
	// notifications (producers always notify).
	BusyRate int
	// ClaimBatch caps the jobs one claim statement takes. Defaults to
	// ClaimBatchDefault; allowed 1 to ClaimBatchMax.
	ClaimBatch int
	// RetryBase and RetryMax shape the retry backoff: RetryBase·2^(attempt-1),
	// jittered, capped at RetryMax. Default to RetryBaseDefault and RetryMaxDefault.
	RetryBase time.Duration
	RetryMax  time.Duration
	// Retention is how long completed jobs are kept before being deleted in
	// small batches. Defaults to RetentionDefault; a negative value keeps them.
	Retention time.Duration
	// DeadRetention is how long dead and cancelled jobs are kept, so there
	// is time to look at them and retry them. Defaults to
	// DeadRetentionDefault; a negative value keeps them.
	DeadRetention time.Duration
	// HardStopGrace is how long a hard stop waits for cancelled handlers to
	// return. A handler still running then is abandoned: Run returns, its
	// lease is no longer renewed, and after it expires another worker runs
	// the job, so a process should exit once Run returns. Defaults to
	// HardStopGraceDefault.
	HardStopGrace time.Duration
	// Recurring are tasks this worker schedules: each enqueues a job at
	// every slot of its schedule. Any number of workers may declare the same
	// task; exactly one job is enqueued per slot. Defaults to none.
	Recurring []RecurringTask
	// Observer, if set, is told of every wake-up, claim and outcome (see
	// package metrics). Defaults to none.
	Observer Observer
	// Logger defaults to zap.NewNop().
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
	for _, q := range c.Queues {
		if err := channel.ValidateQueue(q); err != nil {
			return fmt.Errorf("Queues: %w", err)
		}
	}
	if len(c.Kinds) == 0 {
		return errors.New("Kinds is empty: register at least one handler")
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
			if k.Limit.Max < 1 {
				return fmt.Errorf("Kinds: kind %q has Limit.Max %d; at least 1", k.Name, k.Limit.Max)
			}
			if k.Limit.Key != "" && slices.Contains(strings.Split(k.Limit.Key, "."), "") {
				return fmt.Errorf("Kinds: kind %q has Limit.Key %q; want a dotted path such as account.id", k.Name, k.Limit.Key)
			}
		}
		seen[k.Name] = true
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
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		return fmt.Errorf("RetryBase %s / RetryMax %s: need 0 < RetryBase <= RetryMax", c.RetryBase, c.RetryMax)
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

// pollConfig is the poller configuration of one queue's producer.
func (c Config) pollConfig(queue string) fallbackpoll.Config {
	log := c.Logger
	if queue != "" {
		log = log.With(zap.String("queue", queue))
	}
	return fallbackpoll.Config{
		PurePoll: c.Mode == ModePoll, SafetyPoll: c.SafetyPoll, UnhealthyPoll: c.UnhealthyPoll,
		PollMin: c.PollMin, PollMax: c.PollMax, Logger: log,
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
