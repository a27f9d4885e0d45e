package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
)

// PickupBucketsDefault are the pickup latency histogram's upper bounds, in
// seconds. They resolve each way a job is found: a notification or a WAL
// record (a millisecond or two), a poll (tens of milliseconds to seconds),
// the timer of a scheduled job, the safety poll that catches a lost
// notification (its interval, 30 s by default), and a backlog beyond it.
var PickupBucketsDefault = []float64{
	.0005, .001, .002, .003, .005, .01, .02, .05, .1, .2, .5,
	1, 2, 5, 10, 20, 30, 60, 120, 300,
}

// RunBucketsDefault are the run time histogram's upper bounds, in seconds:
// from a handler that returns at once to one that runs for an hour.
var RunBucketsDefault = []float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

// Defaults of Options.
const (
	StatsMaxAgeDefault  = 5 * time.Second
	StatsTimeoutDefault = 5 * time.Second
)

// Options configures a Metrics. The zero value is usable: without DB, the
// gauges read from the jobs table are left out.
type Options struct {
	// DB is read for the gauges that describe the jobs table. Defaults to
	// none: those gauges are left out.
	DB *pgxpool.Pool
	// StatsMaxAge is how long one read of the jobs table serves scrapes,
	// failed reads included, so that a scrape every second, or several at
	// once, cost one read per StatsMaxAge. Defaults to StatsMaxAgeDefault.
	StatsMaxAge time.Duration
	// StatsTimeout bounds one read of the jobs table. Defaults to
	// StatsTimeoutDefault.
	StatsTimeout time.Duration
	// Queues and Kinds are exported at zero from the start, before anything
	// happens to them, so that the first dead job is an increase a rate or
	// an alert sees rather than a series appearing with 1. Queues of an
	// attached runtime are added by Attach. Default to none: a series
	// appears with its first event.
	Queues, Kinds []string
	// PickupBuckets are the pickup latency histogram's buckets. Defaults to
	// PickupBucketsDefault.
	PickupBuckets []float64
	// RunBuckets are the run time histogram's buckets. Defaults to
	// RunBucketsDefault.
	RunBuckets []float64
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Metrics is a runtime.Observer and a prometheus.Collector. Give it to
// runtime.Config.Observer, Attach the runtime, and register it on your
// registry. One Metrics may observe several runtimes; their counters add up
// per queue and kind. To tell runtimes apart (one per database, say), give
// each a Metrics of its own and register each through
// prometheus.WrapRegistererWith with a label of yours.
type Metrics struct {
	opts Options

	pickup   *prometheus.HistogramVec // queue
	run      *prometheus.HistogramVec // kind
	outcomes *prometheus.CounterVec   // kind, outcome
	claims   *prometheus.CounterVec   // queue
	empty    *prometheus.CounterVec   // queue
	claimed  *prometheus.CounterVec   // queue
	rescued  *prometheus.CounterVec   // queue
	wakeups  *prometheus.CounterVec   // queue, reason

	// The hot path finds a queue's or a kind's series in a map that is
	// replaced, never changed, when a name is first seen: a lookup is one
	// atomic load and a map read, with no lock and no allocation.
	seriesMu sync.Mutex
	queues   atomic.Pointer[map[string]*queueSeries]
	kinds    atomic.Pointer[map[string]*kindSeries]

	runtimesMu sync.Mutex
	runtimes   []*runtime.Runtime

	table *tableStats
}

// wakeReasons and outcomes are the label values whose series are kept at
// hand; a value the runtime adds later still counts, by a slower lookup.
var (
	wakeReasons = [...]runtime.WakeReason{runtime.WakeNotify, runtime.WakeWAL, runtime.WakePoll,
		runtime.WakeTimer, runtime.WakeSlot}
	outcomes = [...]runtime.Outcome{runtime.OutcomeCompleted, runtime.OutcomeRetried, runtime.OutcomeDead,
		runtime.OutcomeCancelled, runtime.OutcomeLeaseLost, runtime.OutcomeReleased, runtime.OutcomeFenced,
		runtime.OutcomeSnoozed}
)

// queueSeries are one queue's series.
type queueSeries struct {
	pickup                          prometheus.Observer
	claims, empty, claimed, rescued prometheus.Counter
	wakeups                         [len(wakeReasons)]prometheus.Counter
}

// kindSeries are one kind's series.
type kindSeries struct {
	run      prometheus.Observer
	outcomes [len(outcomes)]prometheus.Counter
}

// New returns a Metrics; it reads nothing until scraped.
func New(opts Options) *Metrics {
	if opts.StatsMaxAge <= 0 {
		opts.StatsMaxAge = StatsMaxAgeDefault
	}
	if opts.StatsTimeout <= 0 {
		opts.StatsTimeout = StatsTimeoutDefault
	}
	if len(opts.PickupBuckets) == 0 {
		opts.PickupBuckets = PickupBucketsDefault
	}
	if len(opts.RunBuckets) == 0 {
		opts.RunBuckets = RunBucketsDefault
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	log := opts.Logger.Named("metrics")
	m := &Metrics{
		opts: opts,
		pickup: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fila_pickup_latency_seconds",
			Help:    "How long each claimed job waited, from the later of its created_at and run_at to its claim, on the database clock.",
			Buckets: opts.PickupBuckets,
		}, []string{"queue"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fila_job_run_duration_seconds",
			Help:    "How long handlers ran, for attempts that ended by their handler's return (completed, retried, dead).",
			Buckets: opts.RunBuckets,
		}, []string{"kind"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_job_outcomes_total",
			Help: "Attempts ended, by kind and outcome (completed, retried, dead, cancelled, lease_lost, released, fenced, snoozed).",
		}, []string{"kind", "outcome"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_claims_total",
			Help: "Claim statements run.",
		}, []string{"queue"}),
		empty: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_claims_empty_total",
			Help: "Claim statements that found no job.",
		}, []string{"queue"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_claimed_jobs_total",
			Help: "Jobs claimed; divided by fila_claims_total, the jobs per claim.",
		}, []string{"queue"}),
		rescued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_leases_rescued_total",
			Help: "Running jobs whose lease had expired (their worker died or stalled), returned to the queue by a claim of this process.",
		}, []string{"queue"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fila_wakeups_total",
			Help: "Claims by what prompted them: notify, wal, poll (safety, fast or pure poll), timer (a scheduled job or lease expiry), slot (a handler finished while work was left).",
		}, []string{"queue", "reason"}),
		table: newTableStats(opts, log),
	}
	empty := map[string]*queueSeries{}
	m.queues.Store(&empty)
	noKinds := map[string]*kindSeries{}
	m.kinds.Store(&noKinds)
	for _, q := range opts.Queues {
		m.queue(q)
	}
	for _, k := range opts.Kinds {
		m.kind(k)
	}
	return m
}

// Attach adds a runtime whose wake source and running handlers the gauges
// report, and exports its queues' series at zero.
func (m *Metrics) Attach(rt *runtime.Runtime) {
	m.runtimesMu.Lock()
	m.runtimes = append(m.runtimes, rt)
	m.runtimesMu.Unlock()
	for _, q := range rt.Queues() {
		m.queue(q)
	}
	m.table.expectQueues(rt.Queues())
}

// Woken counts a claim by what prompted it.
func (m *Metrics) Woken(queue string, reason runtime.WakeReason) {
	q := m.queue(queue)
	for i, r := range wakeReasons {
		if r == reason {
			q.wakeups[i].Inc()
			return
		}
	}
	m.wakeups.WithLabelValues(queue, string(reason)).Inc()
}

// Claimed counts a claim statement, its jobs and the leases it rescued, and
// observes each job's pickup latency.
func (m *Metrics) Claimed(queue string, jobs []*runtime.Job, rescued int) {
	q := m.queue(queue)
	q.claims.Inc()
	if len(jobs) == 0 {
		q.empty.Inc()
	} else {
		q.claimed.Add(float64(len(jobs)))
	}
	if rescued > 0 {
		q.rescued.Add(float64(rescued))
	}
	for _, j := range jobs {
		// created_at and run_at are both the database's; a negative wait can
		// only come from a created_at written by hand in the future.
		q.pickup.Observe(max(j.Wait, 0).Seconds())
	}
}

// Finished counts an attempt's outcome and, when its handler returned by
// itself, observes its run time. An interrupted handler's time (cancelled,
// lease lost, released at shutdown) says how long it had run when it was
// stopped, not how long its work takes, and a fenced outcome may carry no
// time at all: those are counted, not timed.
func (m *Metrics) Finished(job *runtime.Job, outcome runtime.Outcome, ran time.Duration) {
	k := m.kind(job.Kind)
	switch outcome {
	case runtime.OutcomeCompleted, runtime.OutcomeRetried, runtime.OutcomeDead:
		k.run.Observe(max(ran, 0).Seconds())
	}
	for i, o := range outcomes {
		if o == outcome {
			k.outcomes[i].Inc()
			return
		}
	}
	m.outcomes.WithLabelValues(job.Kind, string(outcome)).Inc()
}

// queue returns a queue's series, creating them when it is first seen.
func (m *Metrics) queue(name string) *queueSeries {
	if s := (*m.queues.Load())[name]; s != nil {
		return s
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	old := *m.queues.Load()
	if s := old[name]; s != nil {
		return s
	}
	s := &queueSeries{
		pickup:  m.pickup.WithLabelValues(name),
		claims:  m.claims.WithLabelValues(name),
		empty:   m.empty.WithLabelValues(name),
		claimed: m.claimed.WithLabelValues(name),
		rescued: m.rescued.WithLabelValues(name),
	}
	for i, r := range wakeReasons {
		s.wakeups[i] = m.wakeups.WithLabelValues(name, string(r))
	}
	next := make(map[string]*queueSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = s
	m.queues.Store(&next)
	return s
}

// kind returns a kind's series, creating them when it is first seen.
func (m *Metrics) kind(name string) *kindSeries {
	if s := (*m.kinds.Load())[name]; s != nil {
		return s
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	old := *m.kinds.Load()
	if s := old[name]; s != nil {
		return s
	}
	s := &kindSeries{run: m.run.WithLabelValues(name)}
	for i, o := range outcomes {
		s.outcomes[i] = m.outcomes.WithLabelValues(name, string(o))
	}
	next := make(map[string]*kindSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = s
	m.kinds.Store(&next)
	return s
}

var _ runtime.Observer = (*Metrics)(nil)
