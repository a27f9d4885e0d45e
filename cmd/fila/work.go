package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	config                      string
	checkOnly                   bool
	queues, execs, timeouts     multiFlag
	limits                      multiFlag
	concurrency, maxConcurrency int
	mode                        string
	lease, safety               time.Duration
	pollMin, pollMax            time.Duration
	shutdown, retention         time.Duration
	metricsAddr, healthAddr     string
	uiAddr, adminToken          string

	// Set by check from --queue QUEUE[=N].
	queueNames       []string
	queueConcurrency map[string]int
}

func (f *workFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "run the worker groups, recurring tasks and endpoints the YAML `FILE` declares (see docs/fila.example.yaml), in place of the other work flags")
	fs.BoolVar(&f.checkOnly, "check", false, "with --config: check the file, print the groups it declares, and exit without connecting")
	fs.Var(&f.queues, "queue", "queue to work, as QUEUE, or QUEUE=N to run up to N of its jobs at once instead of --concurrency (repeatable; default: default)")
	fs.Var(&f.execs, "exec", "KIND=COMMAND: run COMMAND with sh -c for each job of KIND; payload on stdin, its stdout goes to this worker's stdout, the tail of its stderr becomes the job's error; exit 0 completes, "+fmt.Sprint(ExitPermanent)+" fails permanently, anything else retries (repeatable, one per kind)")
	fs.Var(&f.timeouts, "timeout", "KIND=DURATION: cancel a job of KIND after this long (repeatable, one per kind)")
	fs.Var(&f.limits, "limit", "KIND=N[:PATH]: run at most N jobs of KIND at once across every worker, per value of the payload's dotted PATH (such as account.id), or for the whole kind without one; every worker of KIND must give the same (repeatable, one per kind)")
	fs.IntVar(&f.concurrency, "concurrency", runtime.ConcurrencyDefault, fmt.Sprintf("handlers running at once in each queue not given its own by --queue QUEUE=N, 1 to %d", runtime.ConcurrencyMax))
	fs.IntVar(&f.maxConcurrency, "max-concurrency", 0, fmt.Sprintf("cap on handlers running at once across all queues, which take free slots in turn; 0 is no cap beyond each queue's own (at most %d per queue)", runtime.ConcurrencyMax))
	fs.StringVar(&f.mode, "mode", string(runtime.ModeNotify), "how workers learn of new jobs: notify, poll or wal")
	fs.DurationVar(&f.lease, "lease", runtime.LeaseDefault, fmt.Sprintf("lease of a claimed job, kept alive by heartbeats; a crashed worker's job runs again after this (%s to %s)", runtime.LeaseMin, runtime.LeaseMax))
	fs.DurationVar(&f.safety, "safety-poll", runtime.SafetyPollDefault, fmt.Sprintf("safety poll interval while the wake source is healthy (%s to %s)", runtime.SafetyPollMin, runtime.SafetyPollMax))
	fs.DurationVar(&f.pollMin, "poll-min", runtime.PollMinDefault, "poll mode: interval while work flows (above 0)")
	fs.DurationVar(&f.pollMax, "poll-max", runtime.PollMaxDefault, "poll mode: idle backoff cap (at least --poll-min)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", shutdownTimeoutDefault, "on SIGTERM, let running jobs finish for this long, then cancel them; 0 cancels them at once (a second signal also does)")
	fs.DurationVar(&f.retention, "retention", runtime.RetentionDefault, "delete completed jobs older than this; negative keeps them")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "HOST:PORT to serve Prometheus metrics on, at /metrics (default: none)")
	fs.StringVar(&f.healthAddr, "health-addr", "", "HOST:PORT to serve /livez (the process is alive) and /readyz (the database answers and the wake source is up; 503 with the reason if not) on; may equal --metrics-addr (default: none)")
	fs.StringVar(&f.uiAddr, "ui-addr", "", "HOST:PORT to serve the web dashboard on, as fila ui does (default: none)")
	fs.StringVar(&f.adminToken, "admin-token", "", uiTokenUsage)
}

// flagsBesideConfig are the flags --config leaves to the command line: the
// connections (when the file sets none) and how to log.
var flagsBesideConfig = []string{"config", "check", "dsn", "listen-dsn", "log-level", "log-format"}

// check refuses values out of range with the flag's name, before
// runtime.Config could read a zero as its default or adjust one quietly.
func (f *workFlags) check() error {
	if f.checkOnly {
		return errors.New("--check checks a configuration file: give it with --config")
	}
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
	if f.uiAddr != "" {
		if err := checkUIAddr("--ui-addr", f.uiAddr); err != nil {
			return err
		}
	} else if f.adminToken != "" {
		return errors.New("--admin-token protects the dashboard: give --ui-addr too")
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
	if f.config != "" {
		return runWorkFile(ctx, g, fs, f.config, f.checkOnly)
	}
	if err := f.check(); err != nil {
		return err
	}
	kinds, err := buildKinds(f.execs, f.timeouts, f.limits, g.stdout)
	if err != nil {
		return err
	}
	return g.runProcess(ctx, &workProcess{
		dsn: g.mainDSN(),
		groups: []groupPlan{{cfg: runtime.Config{
			DSN: g.mainDSN(), ListenDSN: g.listenerDSN(), Queues: f.queueNames, Kinds: kinds,
			Concurrency: f.concurrency, QueueConcurrency: f.queueConcurrency, MaxConcurrency: f.maxConcurrency,
			Mode: runtime.Mode(f.mode), Lease: f.lease,
			SafetyPoll: f.safety, PollMin: f.pollMin, PollMax: f.pollMax,
			Retention: f.retention,
		}}},
		shutdown:    f.shutdown,
		metricsAddr: f.metricsAddr, healthAddr: f.healthAddr,
		uiAddr: f.uiAddr, uiToken: f.adminToken, uiSetting: "--ui-addr",
	})
}

// runWorkFile runs `fila work --config FILE`: the flags of a single runtime
// are refused, as the file declares the workers.
func runWorkFile(ctx context.Context, g *globals, fs *flag.FlagSet, path string, checkOnly bool) error {
	var conflict string
	fs.Visit(func(fl *flag.Flag) {
		if conflict == "" && !slices.Contains(flagsBesideConfig, fl.Name) {
			conflict = fl.Name
		}
	})
	if conflict != "" {
		return fmt.Errorf("--%s cannot be combined with --config: the file declares the workers; set it there", conflict)
	}
	wf, err := loadWorkFile(path, os.LookupEnv)
	if err != nil {
		return err
	}
	// A connection the file sets is not also given on the command line:
	// which one wins would be a guess.
	dsn, listenDSN := g.mainDSN(), g.listenerDSN()
	if wf.dsn != "" {
		if g.dsn != "" {
			return fmt.Errorf("--dsn cannot be combined with a configuration file that sets dsn (%s)", path)
		}
		dsn, listenDSN = wf.dsn, wf.dsn
	}
	if wf.listenDSN != "" {
		if g.listenDSN != "" {
			return fmt.Errorf("--listen-dsn cannot be combined with a configuration file that sets listen_dsn (%s)", path)
		}
		listenDSN = wf.listenDSN
	}
	p := &workProcess{
		dsn:         dsn,
		shutdown:    wf.shutdown,
		metricsAddr: wf.metricsAddr, healthAddr: wf.healthAddr,
		uiAddr: wf.uiAddr, uiToken: wf.uiToken, uiSetting: path + ": ui_addr",
	}
	for _, gs := range wf.groups {
		cfg := gs.cfg
		cfg.DSN, cfg.ListenDSN = dsn, listenDSN
		if gs.dsn != "" {
			cfg.DSN, cfg.ListenDSN = gs.dsn, gs.dsn
		}
		if gs.listenDSN != "" {
			cfg.ListenDSN = gs.listenDSN
		}
		if cfg.DSN == "" {
			return gs.at.errorf("group %s has no database: set dsn in the file (as ${FILA_DSN}), or give --dsn, $FILA_DSN or $DATABASE_URL", gs.name)
		}
		cfg.Kinds = execKinds(gs.execs, g.stdout)
		p.groups = append(p.groups, groupPlan{name: gs.name, cfg: cfg, at: &gs.at})
	}
	if checkOnly {
		return g.checkProcess(p, path)
	}
	for _, t := range p.unhandledTasks() {
		g.log().Warn("no group of this file handles a recurring task's kind on its queue: another worker must",
			zap.String("task", t.Name), zap.String("kind", t.Kind), zap.String("queue", or(t.Queue, "default")))
	}
	return g.runProcess(ctx, p)
}

// unhandledTasks are the recurring tasks whose jobs no group of p runs: a
// worker elsewhere may, but a typo in a kind or a queue looks the same.
func (p *workProcess) unhandledTasks() []runtime.RecurringTask {
	var out []runtime.RecurringTask
	for _, gp := range p.groups {
		for _, t := range gp.cfg.Recurring {
			handled := slices.ContainsFunc(p.groups, func(other groupPlan) bool {
				c := other.cfg.WithDefaults()
				return slices.Contains(c.Queues, or(t.Queue, "default")) &&
					slices.ContainsFunc(c.Kinds, func(k runtime.Kind) bool { return k.Name == t.Kind })
			})
			if !handled {
				out = append(out, t)
			}
		}
	}
	return out
}

// workProcess is what one `fila work` runs and serves, from its flags or
// from a configuration file.
type workProcess struct {
	// dsn is the main DSN, which the metrics and the dashboard read.
	dsn      string
	groups   []groupPlan
	shutdown time.Duration

	metricsAddr, healthAddr string
	uiAddr, uiToken         string
	uiSetting               string // names ui_addr or --ui-addr in errors
}

// groupPlan is a runtime to build: its name ("" without --config), its
// configuration, and where the file declares it.
type groupPlan struct {
	name string
	cfg  runtime.Config
	at   *confNode
}

// newRuntimes builds every group's runtime; an error names the group.
func (p *workProcess) newRuntimes(log *zap.Logger, observer runtime.Observer) ([]group, error) {
	groups := make([]group, 0, len(p.groups))
	for _, gp := range p.groups {
		cfg := gp.cfg
		cfg.Logger = log
		if gp.name != "" {
			cfg.Logger = log.With(zap.String("group", gp.name))
		}
		if observer != nil {
			cfg.Observer = observer
		}
		rt, err := runtime.New(cfg)
		if err != nil {
			if gp.at != nil {
				return nil, gp.at.errorf("group %s: %v", gp.name, err)
			}
			return nil, err
		}
		groups = append(groups, group{name: gp.name, rt: rt})
	}
	return groups, nil
}

// kindNames are the kinds every group handles, each once.
func (p *workProcess) kindNames() []string {
	var names []string
	for _, gp := range p.groups {
		for _, k := range gp.cfg.Kinds {
			if !slices.Contains(names, k.Name) {
				names = append(names, k.Name)
			}
		}
	}
	return names
}

// checkProcess builds the runtimes, which checks their configurations
// without connecting, and prints what the process would run.
func (g *globals) checkProcess(p *workProcess, path string) error {
	if _, err := p.newRuntimes(zap.NewNop(), nil); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "%s: %d worker group(s)\n", path, len(p.groups))
	for _, gp := range p.groups {
		c := gp.cfg.WithDefaults()
		var kinds []string
		for _, k := range c.Kinds {
			kinds = append(kinds, k.Name)
		}
		fmt.Fprintf(g.stdout, "  %s: queues %s, mode %s, concurrency %d, kinds %s",
			gp.name, strings.Join(c.Queues, ","), c.Mode, c.Concurrency, strings.Join(kinds, ","))
		for _, t := range c.Recurring {
			fmt.Fprintf(g.stdout, ", recurring %s (%s)", t.Name, t.Schedule)
		}
		fmt.Fprintln(g.stdout)
	}
	for _, t := range p.unhandledTasks() {
		fmt.Fprintf(g.stdout, "note: no group handles kind %s on queue %s, which recurring task %s enqueues\n",
			t.Kind, or(t.Queue, "default"), t.Name)
	}
	return nil
}

// runProcess builds p's runtimes, serves the endpoints and the dashboard
// it asks for, and supervises the runtimes until a signal or a failure.
// The endpoints and the dashboard answer until every runtime has stopped.
func (g *globals) runProcess(ctx context.Context, p *workProcess) error {
	log := g.log()
	var m *metrics.Metrics
	if p.metricsAddr != "" {
		statsPool, err := newSmallPool(p.dsn, 2)
		if err != nil {
			return err
		}
		defer statsPool.Close()
		m = metrics.New(metrics.Options{DB: statsPool, Kinds: p.kindNames(), Logger: log})
	}
	var observer runtime.Observer
	if m != nil {
		observer = m
	}
	groups, err := p.newRuntimes(log, observer)
	if err != nil {
		return err
	}
	if m != nil {
		for _, gr := range groups {
			m.Attach(gr.rt)
		}
	}
	if p.metricsAddr != "" || p.healthAddr != "" {
		e, err := serveEndpoints(p.metricsAddr, p.healthAddr, m, readiness(groups), log)
		if err != nil {
			return err
		}
		// Scrapes and probes are answered until the worker has stopped.
		defer e.shutdown()
	}
	if p.uiAddr != "" {
		uiPool, err := newSmallPool(p.dsn, uiPoolConns)
		if err != nil {
			return err
		}
		defer uiPool.Close()
		uiCtx, stopUI := context.WithCancel(context.Background())
		defer stopUI()
		wait, err := startDashboard(uiCtx, p.uiSetting, p.uiAddr, p.uiToken, uiPool, log)
		if err != nil {
			return err
		}
		defer func() {
			stopUI()
			if err := wait(); err != nil {
				log.Warn("dashboard stopped with an error", zap.Error(err))
			}
		}()
	}
	return supervise(ctx, groups, p.shutdown, g.laterSignals, log.Named("work"))
}

// uiPoolConns bounds the connections the dashboard of a worker holds.
const uiPoolConns = 4

// readiness is /readyz's check: every group works as configured.
func readiness(groups []group) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, gr := range groups {
			if err := gr.rt.CheckReady(ctx); err != nil {
				return fmt.Errorf("%s%w", gr.label(), err)
			}
		}
		return nil
	}
}

// newSmallPool opens a pool of at most conns connections on dsn, connecting
// at its first use: the metrics read the jobs table's statistics on one,
// the dashboard on another, so that neither waits behind the workers' own
// statements nor behind each other.
func newSmallPool(dsn string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(dsn)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	return pool, nil
}

// buildKinds turns the flags into handlers, beside the built-in demo kinds.
// A kind given twice, or a built-in given again, is refused: the runtime's
// Go API refuses duplicates too, and "the last one wins" hides a typo.
func buildKinds(execs, timeouts, limits multiFlag, stdout io.Writer) ([]runtime.Kind, error) {
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
	// kindOf finds the kind a --timeout or --limit names, once each.
	kindOf := func(flagName, arg, name string, given map[string]bool) (*runtime.Kind, error) {
		i, found := index[name]
		if !found {
			return nil, fmt.Errorf("--%s %q: no kind %q is handled (add --exec %s=COMMAND)", flagName, arg, name, name)
		}
		if given[name] {
			return nil, fmt.Errorf("--%s: kind %s is given twice", flagName, name)
		}
		given[name] = true
		return &kinds[i], nil
	}
	timed := map[string]bool{}
	for _, t := range timeouts {
		name, ds, ok := strings.Cut(t, "=")
		d, err := time.ParseDuration(strings.TrimSpace(ds))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("--timeout %q: want KIND=DURATION such as resize=30s", t)
		}
		k, err := kindOf("timeout", t, name, timed)
		if err != nil {
			return nil, err
		}
		k.Timeout = d
	}
	limited := map[string]bool{}
	for _, l := range limits {
		name, spec, ok := strings.Cut(l, "=")
		n, path, _ := strings.Cut(spec, ":")
		max, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || err != nil {
			return nil, fmt.Errorf("--limit %q: want KIND=N or KIND=N:PATH such as charge=2:account.id", l)
		}
		if max < 1 || max > limitMaxMax {
			return nil, fmt.Errorf("--limit %s: %d out of range: allowed 1 to %d", l, max, limitMaxMax)
		}
		if err := checkLimitKey(path); path != "" && err != nil {
			return nil, fmt.Errorf("--limit %s: %w", l, err)
		}
		k, err := kindOf("limit", l, name, limited)
		if err != nil {
			return nil, err
		}
		k.Limit = &runtime.Limit{Max: max, Key: path}
	}
	return kinds, nil
}

// execKinds are the handlers of a worker group of a configuration file:
// the built-in demo kinds and the file's commands.
func execKinds(execs []execSpec, stdout io.Writer) []runtime.Kind {
	kinds := builtinKinds()
	for _, e := range execs {
		kinds = append(kinds, runtime.Kind{Name: e.name, Handler: execHandler(e.command, stdout), Timeout: e.timeout, Limit: e.limit})
	}
	return kinds
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
