// Command peers runs Fila's benchmark scenarios — pickup latency at steady
// insert rates and drain throughput — on River and gue (Go) and on
// graphile-worker and pg-boss (Node.js, run by node/peer.js), and prints them
// side by side with Fila's own `fila bench` run on the same machine and
// database server. It lives in a module of its own so that the main module
// never depends on any peer.
//
//	cd bench/peers && go run . [--rates 10,100,1000] [--duration 5s] [--json out.json] [--chart cdf.svg]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgarvardt/gue/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// filaScenariosDefault are the scenarios of `fila bench` whose figures the
// goals read (all but producers, steady and the minutes-long soak).
const filaScenariosDefault = "latency,floor,drain,sqlfloor,idle,bigtable"

// defaultDSN is used when neither --dsn, FILA_DSN nor DATABASE_URL says otherwise.
const defaultDSN = "postgres://postgres@127.0.0.1:5432/postgres"

// options are the command line's settings.
type options struct {
	dsn           string
	rates         []int
	duration      time.Duration
	minSamples    int
	drainJobs     int
	gueWorkers    int
	scenarios     map[string]bool
	systems       map[string]bool
	jsonPath      string
	chartPath     string
	withFila      bool
	filaModes     string
	filaScenarios string
	repoRoot      string
	nodeDir       string
}

// Systems this command knows, in the order they run.
var allSystems = []string{bench.SystemRiver, "gue", bench.SystemGraphileWorker, bench.SystemPgBoss}

// runner carries what every scenario needs.
type runner struct {
	adminDSN string
	log      *zap.Logger
	// node finds node and installs the Node.js module, once, when a
	// Node.js peer first needs it.
	node func() (nodeModule, error)
	// created, if set, is told the name of every database a scenario
	// creates, so tests can check that each one is dropped again.
	created func(name string)
}

func (r *runner) createDatabase(ctx context.Context) (*database, error) {
	db, err := createDatabase(ctx, r.adminDSN)
	if err == nil && r.created != nil {
		r.created(db.name)
	}
	return db, err
}

func main() {
	os.Exit(run())
}

func run() int {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		return 2
	}
	log := newLogger()
	defer func() { _ = log.Sync() }()

	// Ctrl-C cancels the scenario in progress; its deferred DROP DATABASE
	// still runs on a context of its own. A second Ctrl-C kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()

	r := &runner{adminDSN: o.dsn, log: log, node: sync.OnceValues(func() (nodeModule, error) {
		return nodeSetup(ctx, o.nodeDir, log)
	})}
	out, failed := r.runPeers(ctx, o)
	if ctx.Err() != nil {
		log.Warn("interrupted; printing what finished")
		_ = printResults(os.Stdout, out, nil, "")
		return 130
	}

	var fila *results
	filaNote := ""
	if o.withFila {
		fila, err = runFila(ctx, o, log)
		if err != nil {
			filaNote = "Fila's own benchmark was not run (" + err.Error() + "); the peers are shown alone."
			log.Warn("fila bench unavailable", zap.Error(err))
		}
	}
	if err := printResults(os.Stdout, out, fila, filaNote); err != nil {
		log.Error("print results", zap.Error(err))
		return 1
	}
	merged := out.merge(fila)
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, merged); err != nil {
			log.Error("write JSON", zap.Error(err))
			return 1
		}
	}
	if o.chartPath != "" {
		if err := writeCharts(o.chartPath, merged.Latency, o.rates); err != nil {
			log.Error("write chart", zap.Error(err))
			return 1
		}
	}
	if failed > 0 {
		log.Error("some scenarios failed", zap.Int("failed", failed))
		return 1
	}
	return 0
}

// runPeers runs every selected scenario for every peer configuration, going
// on past a failed scenario so that one broken configuration still leaves the
// others' numbers. It returns the results and how many scenarios failed.
func (r *runner) runPeers(ctx context.Context, o options) (*results, int) {
	out := &results{Machine: describe(ctx, o.dsn)}
	r.log.Info("machine", zap.Stringer("machine", out.Machine))
	failed := 0
	if o.scenarios["latency"] {
		specs := latencySpecs(o.gueWorkers, r.node, r.log)
		for _, rate := range o.rates {
			for _, s := range specs {
				if !o.systems[s.system] {
					continue
				}
				if ctx.Err() != nil {
					return out, failed
				}
				begin := time.Now()
				res, err := r.runLatency(ctx, s, rate, jobsFor(rate, o.duration, o.minSamples))
				if err != nil {
					failed++
					r.log.Error("latency scenario failed", zap.String("system", s.system), zap.String("mode", s.mode), zap.Int("rate", rate), zap.Error(err))
					continue
				}
				r.log.Info(fmt.Sprintf("latency %-15s %-20s %5d/s: p50 %s ms, p99 %s ms, max %s ms, %d jobs, %d lost (%.1fs)",
					s.system, s.mode, rate, fmtMs(res.P50Ms), fmtMs(res.P99Ms), fmtMs(res.MaxMs), res.Count, res.Lost, time.Since(begin).Seconds()))
				out.Latency = append(out.Latency, res)
			}
		}
	}
	if o.scenarios["drain"] {
		for _, candidates := range drainSpecs(o.gueWorkers, r.node, r.log) {
			var best *bench.ThroughputResult
			for _, s := range candidates {
				if !o.systems[s.system] {
					continue
				}
				if ctx.Err() != nil {
					return out, failed
				}
				res, err := r.runDrain(ctx, s, o.drainJobs)
				if err != nil {
					failed++
					r.log.Error("drain scenario failed", zap.String("system", s.system), zap.String("mode", s.mode), zap.Error(err))
					continue
				}
				r.log.Info(fmt.Sprintf("drain   %-15s %-22s %6d jobs in %.2fs: %.0f jobs/s",
					s.system, s.mode, res.Jobs, res.Seconds, res.JobsPerSec))
				if best == nil || res.JobsPerSec > best.JobsPerSec {
					best = &res
				}
			}
			if best != nil {
				out.Throughput = append(out.Throughput, *best)
			}
		}
	}
	return out, failed
}

// jobsFor is how many jobs one latency run at rate inserts: duration's
// worth, and at least minSamples, so that even the slowest rate gives a
// p50 enough samples to decide a goal.
func jobsFor(rate int, duration time.Duration, minSamples int) int {
	return max(int(int64(rate)*int64(duration)/int64(time.Second)), minSamples, 1)
}

// Configurations of the Node.js peers. Options left out keep the library's
// defaults (node/peer.js passes on only what is set).
var (
	// graphileTuned is graphile-worker's own performance configuration
	// (its documentation's "Performance" page): 24 concurrent jobs, a pool
	// of 25, a local queue of 500 jobs fetched in one statement, and
	// completions and failures batched (delay 0: whatever finished in the
	// same tick of the event loop).
	graphileTuned = map[string]any{"concurrentJobs": 24, "maxPoolSize": 25, "localQueueSize": 500,
		"completeJobBatchDelay": 0, "failJobBatchDelay": 0}
	// graphileTunedWide is the same with 100 concurrent jobs and a local
	// queue of 1000, a candidate for the drain.
	graphileTunedWide = map[string]any{"concurrentJobs": 100, "maxPoolSize": 25, "localQueueSize": 1000,
		"completeJobBatchDelay": 0, "failJobBatchDelay": 0}
	// pgBossTuned is pg-boss 10 at its fastest polling: ten workers (each
	// work() call adds one, the way its author advises for concurrency in
	// version 10), each fetching up to 100 jobs every 0.5 s, the shortest
	// interval pg-boss accepts.
	pgBossTuned = map[string]any{"workers": 10, "batchSize": 100, "pollingIntervalSeconds": 0.5}
)

// latencySpecs are the configurations measured for pickup latency. River
// keeps its defaults except for the queue's 100 workers; "tuned-10ms" lowers
// only FetchCooldown, which is what bounds River's pickup after a NOTIFY.
// gue cannot be woken: it only polls, at its default interval or at 50 ms.
// graphile-worker LISTENs: its defaults (one job at a time) and its
// performance preset. pg-boss only polls: its defaults (one worker, one job
// every 2 s) and its fastest polling.
func latencySpecs(gueWorkers int, node func() (nodeModule, error), log *zap.Logger) []spec {
	return []spec{
		riverSpec("default", 100, 0),
		riverSpec("tuned-10ms", 100, 10*time.Millisecond),
		gueSpec("default", gueWorkers, 0, "", log),
		gueSpec("poll-50ms", gueWorkers, 50*time.Millisecond, "", log),
		nodeSpec(systemGraphile, "default", 1, map[string]any{}, node, log),
		nodeSpec(systemGraphile, "tuned-24c-lq500", 24, graphileTuned, node, log),
		nodeSpec(systemPgBoss, "default", 1, map[string]any{}, node, log),
		nodeSpec(systemPgBoss, "tuned-10w-b100-500ms", 10, pgBossTuned, node, log),
	}
}

// drainSpecs are the drain configurations, in groups: each group yields one
// result, the best of its candidates, named by its settings. The tuned
// groups try a few worker counts, because the best count depends on the
// machine. River's tuned candidates shorten FetchCooldown, which caps a
// queue at MaxWorkers jobs per cooldown. gue's switch to the run_at poll
// strategy: its default orders by priority alone, which the
// (queue, run_at, priority) index cannot serve, so every lock sorts the
// whole backlog (about 20 ms at 20 000 rows) and a drain slows with the
// square of its size. pg-boss's default (one job every 2 s) would take
// hours over the default backlog and is not run; its tuned candidates fetch
// 100 or 1000 jobs per poll, from 10 or 20 workers.
func drainSpecs(gueWorkers int, node func() (nodeModule, error), log *zap.Logger) [][]spec {
	var riverTuned, gueTuned []spec
	for _, w := range []int{200, 500, 1000} {
		riverTuned = append(riverTuned, riverSpec(fmt.Sprintf("tuned-%dw-1ms", w), w, time.Millisecond))
	}
	for _, w := range []int{gueWorkers, 2 * gueWorkers} {
		gueTuned = append(gueTuned, gueSpec(fmt.Sprintf("tuned-runat-%dw-10ms", w), w, 10*time.Millisecond, gue.RunAtPollStrategy, log))
	}
	return [][]spec{
		{riverSpec("default", 100, 0)},
		riverTuned,
		{gueSpec("default", gueWorkers, 0, "", log)},
		gueTuned,
		{nodeSpec(systemGraphile, "default", 1, map[string]any{}, node, log)},
		{
			nodeSpec(systemGraphile, "tuned-24c-lq500", 24, graphileTuned, node, log),
			nodeSpec(systemGraphile, "tuned-100c-lq1000", 100, graphileTunedWide, node, log),
		},
		{
			nodeSpec(systemPgBoss, "tuned-10w-b100-500ms", 10, pgBossTuned, node, log),
			nodeSpec(systemPgBoss, "tuned-10w-b1000-500ms", 10,
				map[string]any{"workers": 10, "batchSize": 1000, "pollingIntervalSeconds": 0.5}, node, log),
			nodeSpec(systemPgBoss, "tuned-20w-b1000-500ms", 20,
				map[string]any{"workers": 20, "batchSize": 1000, "pollingIntervalSeconds": 0.5, "max": 20}, node, log),
		},
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	var o options
	var rates, scenarios, systems string
	fs.StringVar(&o.dsn, "dsn", envOr(defaultDSN, "FILA_DSN", "DATABASE_URL"),
		"PostgreSQL URL of a database to connect to for CREATE/DROP DATABASE (default $FILA_DSN, $DATABASE_URL, else "+defaultDSN+")")
	fs.StringVar(&rates, "rates", "10,100,1000", "comma-separated insert rates, jobs/s, for the latency scenario")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "how long the producer runs at each rate (longer at low rates, see --min-samples)")
	fs.IntVar(&o.minSamples, "min-samples", 200, "jobs per latency run at least, whatever --duration gives: a p50 needs this many to decide a goal")
	fs.IntVar(&o.drainJobs, "drain-jobs", 20000, "jobs inserted before each drain")
	fs.IntVar(&o.gueWorkers, "gue-workers", 10, "gue WorkerPool size (one connection each); the tuned drain also tries twice as many")
	fs.StringVar(&scenarios, "scenarios", "latency,drain", "comma-separated scenarios to run: latency, drain")
	fs.StringVar(&systems, "systems", strings.Join(allSystems, ","), "comma-separated peers to run: "+strings.Join(allSystems, ", "))
	fs.StringVar(&o.jsonPath, "json", "", "write all results, Fila's included, to this JSON file")
	fs.StringVar(&o.chartPath, "chart", "", "write the latency CDF chart to this SVG file (and one per rate beside it)")
	fs.BoolVar(&o.withFila, "with-fila", true, "also run `go run ./cmd/fila bench` from the repository root and compare")
	fs.StringVar(&o.filaModes, "fila-modes", "notify,wal,poll-50ms", "Fila runtime modes for --with-fila (its --modes); empty for all of fila bench's")
	fs.StringVar(&o.filaScenarios, "fila-scenarios", filaScenariosDefault, "Fila's scenarios for --with-fila (its --scenarios): by default those the goals read")
	fs.StringVar(&o.repoRoot, "repo", "../..", "the Fila repository root, for --with-fila")
	fs.StringVar(&o.nodeDir, "node-dir", "node", "the Node.js module that runs graphile-worker and pg-boss (npm ci is run there when node_modules is missing or stale)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// One transport for every system (see report.PlainTransport); Fila's
	// own run (--with-fila) gets the same DSN.
	o.dsn = report.PlainTransport(o.dsn)
	for _, f := range strings.Split(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 100000 {
			return o, fmt.Errorf("--rates: %q is not a rate between 1 and 100000", f)
		}
		o.rates = append(o.rates, n)
	}
	o.scenarios = map[string]bool{}
	for _, f := range strings.Split(scenarios, ",") {
		f = strings.TrimSpace(f)
		if f != "latency" && f != "drain" {
			return o, fmt.Errorf("--scenarios: unknown scenario %q (want latency, drain)", f)
		}
		o.scenarios[f] = true
	}
	o.systems = map[string]bool{}
	for _, f := range strings.Split(systems, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allSystems, f) {
			return o, fmt.Errorf("--systems: unknown system %q (want %s)", f, strings.Join(allSystems, ", "))
		}
		o.systems[f] = true
	}
	if o.duration < 100*time.Millisecond {
		return o, errors.New("--duration must be at least 100ms")
	}
	if o.minSamples < 0 || o.minSamples > 100000 {
		return o, errors.New("--min-samples must be between 0 and 100000")
	}
	if o.drainJobs < 1 {
		return o, errors.New("--drain-jobs must be at least 1")
	}
	if o.gueWorkers < 1 || o.gueWorkers > 50 {
		return o, errors.New("--gue-workers must be between 1 and 50 (each holds a connection)")
	}
	return o, nil
}

func envOr(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

// newLogger writes progress to stderr in zap's console format, so stdout
// carries only the tables.
func newLogger() *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.InfoLevel)
	return zap.New(core).Named("peers")
}
