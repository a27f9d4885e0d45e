package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fila-run/fila/bench/suite"
)

func init() {
	register("bench", "benchmark pickup latency, throughput, idle cost, producer cost, big tables and bulk inserts on a real PostgreSQL", runBench)
}

// benchFlags are bench's own flags.
type benchFlags struct {
	scenarios, rates, modes, producers   string
	duration, idleDuration, prodDuration time.Duration
	drainJobs, workers, claimBatch       int
	minSamples                           int
	jsonPath, chartPath                  string
	chartRate                            int
	cpuProfile, memProfile               string

	soakDuration, soakWindow, soakRetention time.Duration
	soakRate                                int
	bigCompleted, bigScheduled, bigRate     int
	bulkJobs, execJobs, insertSessions      int

	peers    bool
	peersDir string
}

func (f *benchFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.scenarios, "scenarios", strings.Join(suite.DefaultScenarios, ","),
		"scenarios to run, comma-separated, of: "+strings.Join(suite.Scenarios, ", ")+" (soak and flows are not run by default)")
	fs.StringVar(&f.rates, "rates", joinInts(suite.RatesDefault), "steady insert rates of the latency scenario, jobs/s, comma-separated")
	fs.StringVar(&f.modes, "modes", strings.Join(suite.Modes, ","), "runtime modes to compare, comma-separated (wal is skipped where this build lacks it)")
	durationVar(fs, &f.duration, "duration", suite.DurationDefault, "producer run per rate and mode, and the steady-state run")
	fs.IntVar(&f.minSamples, "min-samples", suite.MinSamplesDefault, "jobs per latency run at least, whatever --duration gives at its rate (longer runs at low rates), so a p50 can decide a goal")
	fs.IntVar(&f.drainJobs, "drain-jobs", suite.DrainJobsDefault, "jobs inserted before the drain (and the SQL floor)")
	fs.IntVar(&f.workers, "workers", suite.WorkersDefault, "runtime Concurrency of the drain and steady scenarios")
	fs.IntVar(&f.claimBatch, "claim-batch", suite.ClaimBatchDefault, "runtime ClaimBatch of the drain and steady scenarios, and the SQL floor's batch")
	durationVar(fs, &f.idleDuration, "idle-duration", suite.IdleDurationDefault, "measured window of the idle scenario")
	fs.StringVar(&f.producers, "producers", joinInts(suite.ProducerCountsDefault), "concurrent producer counts of the producers scenario, comma-separated")
	durationVar(fs, &f.prodDuration, "producer-duration", suite.ProducerDurationDefault, "run per producer count and variant")
	fs.StringVar(&f.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&f.chartPath, "chart", "bench-latency.svg", "write the latency CDF chart (SVG) to this file; empty for none")
	fs.IntVar(&f.chartRate, "chart-rate", suite.ChartRateDefault, "the rate whose latencies the chart shows")
	durationVar(fs, &f.soakDuration, "soak-duration", suite.SoakDurationDefault, "how long the soak scenario's producers run")
	fs.IntVar(&f.soakRate, "soak-rate", suite.SoakRateDefault, "the soak scenario's insert rate, jobs/s")
	durationVar(fs, &f.soakWindow, "soak-window", suite.SoakWindowDefault, "the soak scenario's report: one row per window")
	durationVar(fs, &f.soakRetention, "soak-retention", suite.SoakRetentionDefault, "the soak runtime's Retention of completed jobs")
	fs.IntVar(&f.bigCompleted, "bigtable-completed", suite.BigTableCompletedDefault, "completed jobs the bigtable scenario seeds")
	fs.IntVar(&f.bigScheduled, "bigtable-scheduled", suite.BigTableScheduledDefault, "pending jobs scheduled a day ahead the bigtable scenario seeds")
	fs.IntVar(&f.bigRate, "bigtable-rate", suite.BigTableRateDefault, "insert rate of the bigtable scenario's pickup runs, jobs/s")
	fs.IntVar(&f.bulkJobs, "bulk-jobs", suite.BulkJobsDefault, "jobs of the bulk scenario's InsertMany and COPY")
	fs.IntVar(&f.execJobs, "exec-jobs", suite.ExecJobsDefault, "jobs of each round of the exec scenario (fila work --exec against xargs -P)")
	fs.IntVar(&f.insertSessions, "insert-sessions", suite.InsertSessionsDefault, "fresh sessions of each way of inserting in the insert scenario (a session's first insert and its second)")
	fs.BoolVar(&f.peers, "peers", false, "also run River, graphile-worker and pg-boss from the bench/peers module (built with go build; Node.js 20+ for the latter two) in this run, each rate right after Fila's rows of it and the drains after Fila's, so the goals compare with the best of them")
	fs.StringVar(&f.peersDir, "peers-dir", suite.PeersDirDefault, "the bench/peers module's directory, for --peers")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (workers and producers) to this file, for go tool pprof")
	fs.StringVar(&f.memProfile, "memprofile", "", "write an allocation profile of the whole run to this file at its end, for go tool pprof (-sample_index=alloc_space or alloc_objects)")
}

func runBench(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f benchFlags
	f.add(fs)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := positiveFlags(fs); err != nil {
		fmt.Fprintf(g.stderr, "fila bench: %v\n", err)
		return errUsage
	}
	opts, err := f.options()
	if err != nil {
		fmt.Fprintf(g.stderr, "fila bench: %v\n", err)
		return errUsage
	}
	// Logs would garble the tables and the progress line: warnings and
	// errors only, unless asked for.
	levelSet := false
	fs.Visit(func(fl *flag.Flag) { levelSet = levelSet || fl.Name == "log-level" })
	if !levelSet && g.logLevel == "info" {
		g.logLevel = "warn"
	}
	opts.Logger = g.log()
	opts.Progress = g.stderr
	opts.DSN = g.mainDSN()
	if opts.DSN == "" {
		// No DSN given: the local default, or a throwaway cluster.
		opts.DSN, opts.Throwaway = suite.DefaultDSN, true
	}
	if f.cpuProfile != "" {
		out, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, runErr := suite.Run(ctx, opts)
	if f.memProfile != "" {
		if err := writeHeapProfile(f.memProfile); err != nil {
			return err
		}
	}
	if res == nil {
		return runErr
	}
	if err := suite.WriteText(g.stdout, res); err != nil {
		return err
	}
	var errs []error
	if f.jsonPath != "" {
		errs = append(errs, suite.WriteJSON(f.jsonPath, res))
	}
	if f.chartPath != "" && len(suite.ChartSeries(res, f.chartRate)) > 0 {
		errs = append(errs, suite.WriteChart(f.chartPath, res, f.chartRate))
	}
	if runErr != nil {
		errs = append(errs, runErr)
	}
	return errors.Join(errs...)
}

func (f *benchFlags) options() (suite.Options, error) {
	o := suite.Options{
		Scenarios: split(f.scenarios), Modes: split(f.modes), Duration: f.duration, MinSamples: f.minSamples, DrainJobs: f.drainJobs,
		Workers: f.workers, ClaimBatch: f.claimBatch, IdleDuration: f.idleDuration, ProducerDuration: f.prodDuration,
		SoakDuration: f.soakDuration, SoakRate: f.soakRate, SoakWindow: f.soakWindow, SoakRetention: f.soakRetention,
		BigTableCompleted: f.bigCompleted, BigTableScheduled: f.bigScheduled, BigTableRate: f.bigRate, BulkJobs: f.bulkJobs,
		ExecJobs:       f.execJobs,
		InsertSessions: f.insertSessions,
	}
	// The exec scenario runs this very binary as its worker.
	if self, err := os.Executable(); err == nil {
		o.FilaBin = self
	}
	if f.peers {
		if f.peersDir == "" {
			return o, errors.New("--peers-dir is empty: give the bench/peers module's directory")
		}
		o.PeersDir = f.peersDir
	}
	var err error
	if o.Rates, err = ints("--rates", f.rates); err != nil {
		return o, err
	}
	if o.ProducerCounts, err = ints("--producers", f.producers); err != nil {
		return o, err
	}
	if len(o.Scenarios) == 0 {
		return o, errors.New("--scenarios is empty")
	}
	return o, o.WithDefaults().Validate()
}

// positiveFlags refuses a count, rate or duration given as zero or less:
// the suite would otherwise take zero for its default, and run something
// other than what was asked.
func positiveFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		switch v := fl.Value.(flag.Getter).Get().(type) {
		case int:
			if v < 1 {
				err = fmt.Errorf("--%s %d: give at least 1", fl.Name, v)
			}
		case time.Duration:
			if v <= 0 {
				err = fmt.Errorf("--%s %s: give a duration above zero", fl.Name, v)
			}
		}
	})
	return err
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, p := range split(s) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a whole number", flagName, p)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// writeHeapProfile writes the allocation profile (every allocation since the
// start, sampled as the runtime does by default) to path.
func writeHeapProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		_ = out.Close()
		return fmt.Errorf("write the allocation profile: %w", err)
	}
	return out.Close()
}
