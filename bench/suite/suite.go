package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// Scenario names, as --scenarios spells them. bench/peers asks for them
// by name: keep them.
const (
	ScenarioLatency   = "latency"
	ScenarioFloor     = "floor"
	ScenarioDrain     = "drain"
	ScenarioSteady    = "steady"
	ScenarioSQLFloor  = "sqlfloor"
	ScenarioIdle      = "idle"
	ScenarioProducers = "producers"
	ScenarioBigTable  = "bigtable"
	ScenarioBulk      = "bulk"
	ScenarioExec      = "exec"
	ScenarioInsert    = "insert"
	ScenarioSoak      = "soak"
	ScenarioBreakdown = "breakdown"
	ScenarioFlows     = "flows"
)

// Scenarios lists every scenario in the order they run.
var Scenarios = []string{ScenarioLatency, ScenarioFloor, ScenarioDrain, ScenarioSteady, ScenarioSQLFloor,
	ScenarioIdle, ScenarioProducers, ScenarioBigTable, ScenarioBulk, ScenarioExec, ScenarioInsert, ScenarioBreakdown, ScenarioFlows, ScenarioSoak}

// DefaultScenarios are the scenarios run when none are named: all but the
// soak, which runs for minutes on its own, and the flows, three drains of
// their own, so a default run stays a few minutes long.
var DefaultScenarios = slices.DeleteFunc(slices.Clone(Scenarios), func(s string) bool { return s == ScenarioSoak || s == ScenarioFlows })

// Modes of the Fila runtime the latency and idle scenarios compare.
const (
	ModeNotify  = bench.ModeNotify
	ModePoll50  = "poll-50ms"
	ModePoll200 = "poll-200ms"
	ModePoll1s  = "poll-1s"
	ModeWAL     = bench.ModeWAL
)

// Modes lists every runtime mode, the default of Options.Modes.
var Modes = []string{ModeNotify, ModePoll50, ModePoll200, ModePoll1s, ModeWAL}

// Defaults of Options.
var (
	RatesDefault          = []int{10, 100, 1000}
	ProducerCountsDefault = []int{1, 4, 16, 64}
	DurationDefault       = 4 * time.Second
	// MinSamplesDefault is report.MinSamples: at 10 jobs/s, 20 s per row.
	MinSamplesDefault   = report.MinSamples
	DrainJobsDefault    = 20000
	WorkersDefault      = 1000
	ClaimBatchDefault   = 1000
	IdleDurationDefault = 10 * time.Second
	// IdleQueuesSafetyPoll is the safety poll of the idle scenario's
	// workers of many queues: short, so a window of seconds holds several.
	IdleQueuesSafetyPoll     = 2 * time.Second
	ProducerDurationDefault  = 2 * time.Second
	ChartRateDefault         = 100
	SoakDurationDefault      = 5 * time.Minute
	SoakRateDefault          = 3000
	SoakWindowDefault        = time.Minute
	SoakRetentionDefault     = 30 * time.Second
	BigTableCompletedDefault = 1000000
	BigTableScheduledDefault = 1000000
	BigTableRateDefault      = 100
	BulkJobsDefault          = 100000
	ExecJobsDefault          = 1000
	InsertSessionsDefault    = 40
)

// IdleQueuesDefault are the queue counts of the idle scenario's workers of
// many queues: the idle cost must not grow with them.
var IdleQueuesDefault = []int{1, 100, 1000}

// Options select and size the scenarios.
type Options struct {
	// DSN is any database on the server to benchmark; every scenario creates
	// a fresh database next to it and drops it afterwards. Defaults to DefaultDSN.
	DSN string
	// Throwaway starts a throwaway cluster from the installed PostgreSQL
	// binaries when nothing answers at DSN. Defaults to false.
	Throwaway bool
	// Scenarios to run. Defaults to DefaultScenarios.
	Scenarios []string
	// Rates are the steady insert rates of the latency scenario, jobs/s.
	// Defaults to RatesDefault.
	Rates []int
	// Modes are the runtime modes measured. Defaults to Modes.
	Modes []string
	// Duration is how long the producer runs per rate and mode, and how long
	// the steady-state throughput runs. Defaults to DurationDefault.
	Duration time.Duration
	// MinSamples is the fewest jobs one latency run inserts, whatever
	// Duration gives at its rate: at low rates the run is longer, so that
	// its p50 can decide a goal. Defaults to MinSamplesDefault; negative
	// for none (Duration alone).
	MinSamples int
	// DrainJobs is how many jobs the drain scenario inserts first. Defaults
	// to DrainJobsDefault.
	DrainJobs int
	// Workers is the runtime's Concurrency in the drain and steady scenarios.
	// Defaults to WorkersDefault.
	Workers int
	// ClaimBatch is the runtime's ClaimBatch in the drain and steady
	// scenarios, and the batch of the SQL floor. Defaults to ClaimBatchDefault.
	ClaimBatch int
	// IdleDuration is the measured window of the idle scenario. Defaults to
	// IdleDurationDefault.
	IdleDuration time.Duration
	// IdleQueues are the queue counts the idle scenario also measures a
	// notify worker at, with a safety poll of IdleQueuesSafetyPoll so the
	// window holds several. Defaults to IdleQueuesDefault; empty to skip.
	IdleQueues []int
	// ProducerCounts are the numbers of concurrent producers of the producers
	// scenario. Defaults to ProducerCountsDefault.
	ProducerCounts []int
	// ProducerDuration is how long each producer count runs per variant.
	// Defaults to ProducerDurationDefault.
	ProducerDuration time.Duration
	// SoakDuration is how long the soak's producers run. Defaults to
	// SoakDurationDefault.
	SoakDuration time.Duration
	// SoakRate is the soak's insert rate, jobs/s. Defaults to SoakRateDefault.
	SoakRate int
	// SoakWindow is the length of one row of the soak's report. Defaults
	// to SoakWindowDefault.
	SoakWindow time.Duration
	// SoakRetention is the soak runtime's Retention. Defaults to
	// SoakRetentionDefault.
	SoakRetention time.Duration
	// BigTableCompleted and BigTableScheduled are the completed jobs and
	// the pending jobs scheduled in the future the bigtable scenario seeds.
	// Default to BigTableCompletedDefault and BigTableScheduledDefault.
	BigTableCompleted int
	BigTableScheduled int
	// BigTableRate is the insert rate of the bigtable scenario's pickup
	// runs. Defaults to BigTableRateDefault.
	BigTableRate int
	// BulkJobs is the size of the bulk scenario's batch. Defaults to
	// BulkJobsDefault.
	BulkJobs int
	// ExecJobs is how many jobs each round of the exec scenario runs.
	// Defaults to ExecJobsDefault.
	ExecJobs int
	// InsertSessions is how many fresh sessions the insert scenario opens
	// for each way of inserting. Defaults to InsertSessionsDefault.
	InsertSessions int
	// FilaBin is the fila binary the exec scenario runs `fila work --exec`
	// with: `fila bench` sets its own. Without it the scenario is skipped.
	FilaBin string
	// PeersDir, if set, is the bench/peers module's directory: after
	// Fila's scenarios, the peers it holds run there (with `go run`) on the
	// same server and rates, and their rows join the results, so the goals
	// compare with peers measured in this run. Defaults to "": no peers.
	PeersDir string
	// Progress receives progress lines (stderr). Defaults to io.Discard.
	Progress io.Writer
	// Logger receives the runtime's logs. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	if o.DSN == "" {
		o.DSN = DefaultDSN
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = DefaultScenarios
	}
	if len(o.Rates) == 0 {
		o.Rates = RatesDefault
	}
	if len(o.Modes) == 0 {
		o.Modes = Modes
	}
	if o.Duration == 0 {
		o.Duration = DurationDefault
	}
	if o.MinSamples == 0 {
		o.MinSamples = MinSamplesDefault
	}
	if o.DrainJobs == 0 {
		o.DrainJobs = DrainJobsDefault
	}
	if o.Workers == 0 {
		o.Workers = WorkersDefault
	}
	if o.ClaimBatch == 0 {
		o.ClaimBatch = ClaimBatchDefault
	}
	if o.IdleDuration == 0 {
		o.IdleDuration = IdleDurationDefault
	}
	if o.IdleQueues == nil {
		o.IdleQueues = IdleQueuesDefault
	}
	if len(o.ProducerCounts) == 0 {
		o.ProducerCounts = ProducerCountsDefault
	}
	if o.ProducerDuration == 0 {
		o.ProducerDuration = ProducerDurationDefault
	}
	if o.SoakDuration == 0 {
		o.SoakDuration = SoakDurationDefault
	}
	if o.SoakRate == 0 {
		o.SoakRate = SoakRateDefault
	}
	if o.SoakWindow == 0 {
		o.SoakWindow = SoakWindowDefault
	}
	if o.SoakRetention == 0 {
		o.SoakRetention = SoakRetentionDefault
	}
	if o.BigTableCompleted == 0 {
		o.BigTableCompleted = BigTableCompletedDefault
	}
	if o.BigTableScheduled == 0 {
		o.BigTableScheduled = BigTableScheduledDefault
	}
	if o.BigTableRate == 0 {
		o.BigTableRate = BigTableRateDefault
	}
	if o.BulkJobs == 0 {
		o.BulkJobs = BulkJobsDefault
	}
	if o.ExecJobs == 0 {
		o.ExecJobs = ExecJobsDefault
	}
	if o.InsertSessions == 0 {
		o.InsertSessions = InsertSessionsDefault
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Validate names the first option that cannot be used.
func (o Options) Validate() error {
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("scenario %q is unknown: use %s", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, m := range o.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("mode %q is unknown: use %s", m, strings.Join(Modes, ", "))
		}
	}
	for _, r := range o.Rates {
		if r < 1 || r > 100000 {
			return fmt.Errorf("rate %d out of range: allowed 1 to 100000 jobs/s", r)
		}
	}
	for _, p := range o.ProducerCounts {
		if p < 1 || p > 500 {
			return fmt.Errorf("producer count %d out of range: allowed 1 to 500", p)
		}
	}
	switch {
	case o.Duration < 100*time.Millisecond:
		return fmt.Errorf("duration %s too short: at least 100ms", o.Duration)
	case o.MinSamples > 1000000:
		return fmt.Errorf("min samples %d out of range: at most 1000000", o.MinSamples)
	case o.DrainJobs < 1:
		return fmt.Errorf("drain jobs %d: at least 1", o.DrainJobs)
	case o.Workers < 1 || o.Workers > 10000:
		return fmt.Errorf("workers %d out of range: allowed 1 to 10000", o.Workers)
	case o.ClaimBatch < 1 || o.ClaimBatch > 10000:
		return fmt.Errorf("claim batch %d out of range: allowed 1 to 10000", o.ClaimBatch)
	case o.IdleDuration < time.Second:
		return fmt.Errorf("idle duration %s too short: at least 1s", o.IdleDuration)
	case o.ProducerDuration < 100*time.Millisecond:
		return fmt.Errorf("producer duration %s too short: at least 100ms", o.ProducerDuration)
	case o.SoakWindow < time.Second:
		return fmt.Errorf("soak window %s too short: at least 1s", o.SoakWindow)
	case o.SoakDuration < o.SoakWindow:
		return fmt.Errorf("soak duration %s shorter than one window (%s)", o.SoakDuration, o.SoakWindow)
	case o.SoakRate < 1 || o.SoakRate > 100000:
		return fmt.Errorf("soak rate %d out of range: allowed 1 to 100000 jobs/s", o.SoakRate)
	case o.SoakRetention < time.Second:
		return fmt.Errorf("soak retention %s too short: at least 1s", o.SoakRetention)
	case o.BigTableCompleted < 0 || o.BigTableScheduled < 0:
		return fmt.Errorf("bigtable rows %d completed, %d scheduled: neither may be negative", o.BigTableCompleted, o.BigTableScheduled)
	case o.BigTableRate < 1 || o.BigTableRate > 100000:
		return fmt.Errorf("bigtable rate %d out of range: allowed 1 to 100000 jobs/s", o.BigTableRate)
	case o.BulkJobs < 1 || o.BulkJobs > 10000000:
		return fmt.Errorf("bulk jobs %d out of range: allowed 1 to 10000000", o.BulkJobs)
	case o.InsertSessions < 1 || o.InsertSessions > 10000:
		return fmt.Errorf("insert sessions %d out of range: allowed 1 to 10000", o.InsertSessions)
	}
	return nil
}

func (o Options) has(scenario string) bool { return slices.Contains(o.Scenarios, scenario) }

// Results is everything one run measured; it is also the JSON `fila bench
// --json` writes.
type Results struct {
	Machine    report.MachineInfo       `json:"machine"`
	Server     string                   `json:"server"` // "given" or "throwaway cluster"
	Latency    []bench.LatencyResult    `json:"latency"`
	Throughput []bench.ThroughputResult `json:"throughput"`
	Idle       []bench.IdleResult       `json:"idle"`
	Producers  []bench.ProducerResult   `json:"producers"`
	BigTable   *bench.BigTableResult    `json:"bigtable,omitempty"`
	Bulk       *bench.BulkResult        `json:"bulk,omitempty"`
	Exec       *bench.ExecResult        `json:"exec,omitempty"`
	// InsertCost is the insert scenario: the server as given, then a
	// throwaway cluster that preloads PL/pgSQL when the given one does not.
	InsertCost []bench.InsertCostResult `json:"insert_cost,omitempty"`
	Soak       *bench.SoakResult        `json:"soak,omitempty"`
	// Breakdown is where one pickup's time goes, for Fila and the floor.
	Breakdown []bench.BreakdownResult `json:"breakdown,omitempty"`
	// Peers says which peers ran in this run, or why none did.
	Peers string `json:"peers"`
	// Goals are judged on this run's rows alone (see report.Goals); WriteJSON
	// fills them in.
	Goals []report.Goal `json:"goals,omitempty"`
	// Notes say what was skipped or degraded, and why.
	Notes []string `json:"notes,omitempty"`
}

// GoalInput is what the goals are judged on.
func (r *Results) GoalInput() report.GoalInput {
	return report.GoalInput{Latency: r.Latency, Throughput: r.Throughput, Idle: r.Idle, Soak: r.Soak, BigTable: r.BigTable, Exec: r.Exec, InsertCost: r.InsertCost}
}

func (r *Results) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// suite carries what every scenario needs.
type suite struct {
	opts Options
	srv  *server
	log  *zap.Logger
	res  *Results
	// peerBin is the bench/peers binary when peers run (Options.PeersDir),
	// built from peerDir.
	peerBin, peerDir string
}

// Run runs the selected scenarios, each in a fresh database, and returns what
// they measured. A failed scenario is recorded in Notes and the others still
// run; Run returns an error only when nothing can run (no server) or ctx was
// cancelled, with the results gathered so far.
func Run(ctx context.Context, opts Options) (*Results, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	srv, err := openServer(ctx, opts.DSN, opts.Throwaway, opts.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := srv.Close(); cerr != nil {
			opts.Logger.Warn("closing the server", zap.Error(cerr))
		}
	}()
	res := &Results{Server: "given", Peers: "not measured: run with --peers"}
	if srv.cluster != nil {
		res.Server = "throwaway cluster"
	}
	res.Machine, err = report.DescribeMachine(ctx, srv.admin)
	if err != nil {
		res.note("machine: %v", err)
	}
	s := &suite{opts: opts, srv: srv, log: opts.Logger, res: res}
	if opts.PeersDir != "" {
		bin, dir, remove, err := s.buildPeers(ctx)
		switch {
		case err == nil:
			s.peerBin, s.peerDir = bin, dir
			defer remove()
			res.Peers = "not measured: bench/peers measured nothing"
		case ctx.Err() != nil:
			return res, ctx.Err()
		default:
			res.Peers = "not measured: " + err.Error()
			if !errors.As(err, new(peersUnavailable)) {
				res.note("peers: failed: %v", err)
			}
		}
	}

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{ScenarioLatency, s.latency}, // also runs the floor, rate by rate
		{ScenarioDrain, s.drain},
		{ScenarioSteady, s.steady},
		{ScenarioSQLFloor, s.sqlFloor},
		{ScenarioIdle, s.idle},
		{ScenarioProducers, s.producers},
		{ScenarioBigTable, s.bigTable},
		{ScenarioBulk, s.bulk},
		{ScenarioExec, s.exec},
		{ScenarioInsert, s.insertCost},
		{ScenarioBreakdown, s.breakdown},
		{ScenarioFlows, s.flows},
		{ScenarioSoak, s.soak},
	}
	for _, st := range steps {
		if st.name == ScenarioLatency && !opts.has(ScenarioLatency) && !opts.has(ScenarioFloor) {
			continue
		}
		if st.name != ScenarioLatency && !opts.has(st.name) {
			continue
		}
		if err := st.run(ctx); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			if errors.Is(err, errSkipped) {
				res.note("%s: %v", st.name, err)
				continue
			}
			res.note("%s: failed: %v", st.name, err)
			s.log.Error("scenario failed", zap.String("scenario", st.name), zap.Error(err))
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Goals = report.Goals(res.GoalInput())
	return res, nil
}

// errSkipped marks a run that could not happen on this build or server.
var errSkipped = errors.New("skipped")
