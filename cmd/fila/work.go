package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

func init() {
	register("work", "run jobs until SIGTERM (Go built-ins, or any program via --exec KIND=COMMAND)", runWork)
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// workFlags are work's own flags. On the command line a value is what it
// says: every default is spelled out in -h, and zero is never a stand-in
// for it (runtime.Config's "zero means default" is for Go callers).
type workFlags struct {
	queues, execs, timeouts     multiFlag
	concurrency, maxConcurrency int
	mode                        string
	lease, safety               time.Duration
	pollMin, pollMax            time.Duration
	shutdown, retention         time.Duration
	metricsAddr, healthAddr     string

	// Set by check from --queue QUEUE[=N].
	queueNames       []string
	queueConcurrency map[string]int
}

func (f *workFlags) add(fs *flag.FlagSet) {
	fs.Var(&f.queues, "queue", "queue to work, as QUEUE, or QUEUE=N to run up to N of its jobs at once instead of --concurrency (repeatable; default: default)")
	fs.Var(&f.execs, "exec", "KIND=COMMAND: run COMMAND with sh -c for each job of KIND; payload on stdin, its stdout goes to this worker's stdout, the tail of its stderr becomes the job's error; exit 0 completes, "+fmt.Sprint(ExitPermanent)+" fails permanently, anything else retries (repeatable, one per kind)")
	fs.Var(&f.timeouts, "timeout", "KIND=DURATION: cancel a job of KIND after this long (repeatable, one per kind)")
	fs.IntVar(&f.concurrency, "concurrency", runtime.ConcurrencyDefault, fmt.Sprintf("handlers running at once in each queue not given its own by --queue QUEUE=N, 1 to %d", runtime.ConcurrencyMax))
	fs.IntVar(&f.maxConcurrency, "max-concurrency", 0, fmt.Sprintf("cap on handlers running at once across all queues, which take free slots in turn; 0 is no cap beyond each queue's own (at most %d per queue)", runtime.ConcurrencyMax))
	fs.StringVar(&f.mode, "mode", string(runtime.ModeNotify), "how workers learn of new jobs: notify, poll or wal")
	fs.DurationVar(&f.lease, "lease", runtime.LeaseDefault, fmt.Sprintf("lease of a claimed job, kept alive by heartbeats; a crashed worker's job runs again after this (%s to %s)", runtime.LeaseMin, runtime.LeaseMax))
	fs.DurationVar(&f.safety, "safety-poll", runtime.SafetyPollDefault, fmt.Sprintf("safety poll interval while the wake source is healthy (%s to %s)", runtime.SafetyPollMin, runtime.SafetyPollMax))
	fs.DurationVar(&f.pollMin, "poll-min", runtime.PollMinDefault, "poll mode: interval while work flows (above 0)")
	fs.DurationVar(&f.pollMax, "poll-max", runtime.PollMaxDefault, "poll mode: idle backoff cap (at least --poll-min)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM, let running jobs finish for this long, then cancel them; 0 cancels them at once (a second signal also does)")
	fs.DurationVar(&f.retention, "retention", runtime.RetentionDefault, "delete completed jobs older than this; negative keeps them")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "HOST:PORT to serve Prometheus metrics on, at /metrics (default: none)")
	fs.StringVar(&f.healthAddr, "health-addr", "", "HOST:PORT to serve /livez (the process is alive) and /readyz (the database answers and the wake source is up; 503 with the reason if not) on; may equal --metrics-addr (default: none)")
}

// check refuses values out of range with the flag's name, before
// runtime.Config could read a zero as its default or adjust one quietly.
func (f *workFlags) check() error {
	f.queueNames, f.queueConcurrency = nil, map[string]int{}
	for _, arg := range f.queues {
		q, n, given := strings.Cut(arg, "=")
		if err := channel.ValidateQueue(q); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
		if slices.Contains(f.queueNames, q) {
			return fmt.Errorf("--queue %s is given twice", q)
		}
		f.queueNames = append(f.queueNames, q)
		if !given {
			continue
		}
		c, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil {
			return fmt.Errorf("--queue %q: want QUEUE or QUEUE=N, N the jobs of QUEUE run at once, such as mail=5", arg)
		}
		if c < 1 || c > runtime.ConcurrencyMax {
			return fmt.Errorf("--queue %s: concurrency %d out of range: allowed 1 to %d", arg, c, runtime.ConcurrencyMax)
		}
		f.queueConcurrency[q] = c
	}
	if maxTotal := runtime.ConcurrencyMax * max(1, len(f.queueNames)); f.maxConcurrency < 0 || f.maxConcurrency > maxTotal {
		return fmt.Errorf("--max-concurrency %d out of range: allowed 0 (no cap) to %d", f.maxConcurrency, maxTotal)
	}
	if err := checkAddr("metrics-addr", f.metricsAddr); err != nil {
		return err
	}
	if err := checkAddr("health-addr", f.healthAddr); err != nil {
		return err
	}
	switch runtime.Mode(f.mode) {
	case runtime.ModeNotify, runtime.ModePoll, runtime.ModeWAL:
	default:
		return fmt.Errorf("--mode %q is unknown: use notify, poll or wal", f.mode)
	}
	switch {
	case f.concurrency < 1 || f.concurrency > runtime.ConcurrencyMax:
		return fmt.Errorf("--concurrency %d out of range: allowed 1 to %d", f.concurrency, runtime.ConcurrencyMax)
	case f.lease < runtime.LeaseMin || f.lease > runtime.LeaseMax:
		return fmt.Errorf("--lease %s out of range: allowed %s to %s", f.lease, runtime.LeaseMin, runtime.LeaseMax)
	case f.safety < runtime.SafetyPollMin || f.safety > runtime.SafetyPollMax:
		return fmt.Errorf("--safety-poll %s out of range: allowed %s to %s", f.safety, runtime.SafetyPollMin, runtime.SafetyPollMax)
	case f.pollMin <= 0:
		return fmt.Errorf("--poll-min %s: must be above 0", f.pollMin)
	case f.pollMax < f.pollMin:
		return fmt.Errorf("--poll-max %s is below --poll-min %s", f.pollMax, f.pollMin)
	case f.shutdown < 0:
		return fmt.Errorf("--shutdown-timeout %s is negative: 0 cancels running jobs at once", f.shutdown)
	case f.retention == 0:
		return errors.New("--retention 0: give how long to keep completed jobs, or a negative duration to keep them")
	}
	return nil
}

func runWork(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	var f workFlags
	f.add(fs)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	kinds, err := buildKinds(f.execs, f.timeouts, g.stdout)
	if err != nil {
		return err
	}
	cfg := runtime.Config{
		DSN: g.mainDSN(), ListenDSN: g.listenerDSN(), Queues: f.queueNames, Kinds: kinds,
		Concurrency: f.concurrency, QueueConcurrency: f.queueConcurrency, MaxConcurrency: f.maxConcurrency,
		Mode: runtime.Mode(f.mode), Lease: f.lease,
		SafetyPoll: f.safety, PollMin: f.pollMin, PollMax: f.pollMax,
		Retention: f.retention, Logger: g.log(),
	}
	var m *metrics.Metrics
	if f.metricsAddr != "" {
		statsPool, err := g.statsPool()
		if err != nil {
			return err
		}
		defer statsPool.Close()
		kindNames := make([]string, len(kinds))
		for i, k := range kinds {
			kindNames[i] = k.Name
		}
		m = metrics.New(metrics.Options{DB: statsPool, Kinds: kindNames, Logger: g.log()})
		cfg.Observer = m
	}
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	if m != nil {
		m.Attach(rt)
	}
	if f.metricsAddr != "" || f.healthAddr != "" {
		e, err := serveEndpoints(f.metricsAddr, f.healthAddr, m, rt, g.log())
		if err != nil {
			return err
		}
		// Scrapes and probes are answered until the worker has stopped.
		defer e.shutdown()
	}

	// The first SIGTERM/SIGINT (ctx) stops claiming and drains; a second
	// one, or the shutdown timeout, cancels running handlers. A second
	// signal cancels the runtime's own context, its hard stop, rather than
	// Stop's deadline: nothing passed a deadline.
	runCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.log().Info("stopping: finishing running jobs", zap.Duration("shutdown_timeout", f.shutdown))
	stopCtx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	go func() {
		select {
		case <-g.laterSignals:
			g.log().Warn("second signal: cancelling running jobs")
			hardStop()
		case <-stopCtx.Done():
		}
	}()
	if err := rt.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return <-errc
}

// statsPool is the pool the metrics read the jobs table's statistics on:
// two connections at most, opened at the first scrape, so that a scrape
// never waits behind the worker's own statements.
func (g *globals) statsPool() (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(g.mainDSN())
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	return pool, nil
}

// buildKinds turns the flags into handlers, beside the built-in demo kinds.
// A kind given twice, or a built-in given again, is refused: the runtime's
// Go API refuses duplicates too, and "the last one wins" hides a typo.
func buildKinds(execs, timeouts multiFlag, stdout io.Writer) ([]runtime.Kind, error) {
	kinds := builtinKinds()
	index := map[string]int{}
	for i, k := range kinds {
		index[k.Name] = i
	}
	for _, e := range execs {
		name, command, ok := strings.Cut(e, "=")
		if !ok || strings.TrimSpace(command) == "" {
			return nil, fmt.Errorf("--exec %q: want KIND=COMMAND", e)
		}
		if err := runtime.ValidateKind(name); err != nil {
			return nil, fmt.Errorf("--exec %q: %w", e, err)
		}
		if i, dup := index[name]; dup {
			if i < len(builtinKindNames()) {
				return nil, fmt.Errorf("--exec %q: %s is a built-in kind; choose another name", e, name)
			}
			return nil, fmt.Errorf("--exec: kind %s is given twice", name)
		}
		index[name] = len(kinds)
		kinds = append(kinds, runtime.Kind{Name: name, Handler: execHandler(command, stdout)})
	}
	timed := map[string]bool{}
	for _, t := range timeouts {
		name, ds, ok := strings.Cut(t, "=")
		d, err := time.ParseDuration(strings.TrimSpace(ds))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("--timeout %q: want KIND=DURATION such as resize=30s", t)
		}
		i, found := index[name]
		if !found {
			return nil, fmt.Errorf("--timeout %q: no kind %q is handled (add --exec %s=COMMAND)", t, name, name)
		}
		if timed[name] {
			return nil, fmt.Errorf("--timeout: kind %s is given twice", name)
		}
		timed[name] = true
		kinds[i].Timeout = d
	}
	return kinds, nil
}

// builtinKinds are handlers for demos and benchmarks: noop completes at
// once; sleep waits payload.ms milliseconds (or until cancelled).
func builtinKinds() []runtime.Kind {
	return []runtime.Kind{
		{Name: "noop", Handler: func(context.Context, *runtime.Job) error { return nil }},
		{Name: "sleep", Handler: func(ctx context.Context, job *runtime.Job) error {
			var p struct {
				MS int `json:"ms"`
			}
			if err := job.Decode(&p); err != nil {
				return err
			}
			select {
			case <-time.After(time.Duration(p.MS) * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}},
	}
}

// builtinKindNames are the names of builtinKinds, which every worker runs
// and enqueue always accepts.
func builtinKindNames() []string {
	var names []string
	for _, k := range builtinKinds() {
		names = append(names, k.Name)
	}
	return names
}
