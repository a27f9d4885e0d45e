package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

func init() {
	register("work", "run jobs until SIGTERM (Go built-ins, or any program via --exec KIND=COMMAND)", runWork)
}

// flagsBesideConfig are the flags --config leaves to the command line: the
// connections (when the file sets none) and how to log.
var flagsBesideConfig = []string{"config", "check", "dsn", "listen-dsn", "schema", "log-level", "log-format"}

// runWork runs `fila work`: one worker group from its flags, or the groups
// of a configuration file. Both are read into one model and checked by one
// validation (see config.go) before anything connects.
func runWork(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	path := fs.String("config", "", "run the worker groups, recurring tasks and endpoints the YAML `FILE` declares (see docs/fila.example.yaml), in place of the other work flags")
	checkOnly := fs.Bool("check", false, "with --config: check the file, print the groups it declares, and exit without connecting")
	flags := addSettingFlags(fs)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	var w *workConfig
	var err error
	if *path != "" {
		var conflict string
		fs.Visit(func(fl *flag.Flag) {
			if conflict == "" && !slices.Contains(flagsBesideConfig, fl.Name) {
				conflict = fl.Name
			}
		})
		if conflict != "" {
			return fmt.Errorf("--%s cannot be combined with --config: the file declares the workers; set it there", conflict)
		}
		w, err = loadWorkFile(*path, os.LookupEnv)
	} else if *checkOnly {
		return errors.New("--check checks a configuration file: give it with --config")
	} else {
		w, err = readFlags(flags)
	}
	if err != nil {
		return err
	}
	p, err := w.process(g, g.stdout)
	if err != nil {
		return err
	}
	if p.uiAddr != "" {
		// Tokens from the environment too: a token too short, or the same
		// for readers as for admins, is refused by --check and before
		// anything starts.
		if err := p.uiAccess.resolve(os.LookupEnv); err != nil {
			return err
		}
	}
	if *checkOnly {
		return g.checkProcess(p, *path)
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
	// dsn is the main DSN, which the metrics and the dashboard read, in
	// schema (the process's, "" for the search_path's tables).
	dsn      string
	schema   string
	groups   []groupPlan
	shutdown time.Duration

	metricsAddr, healthAddr string
	uiAddr                  string
	uiAccess                uiAccess
	// otel traces every group's attempts (see otel.go).
	otel bool
	// names says how the user calls settings by their keys in errors:
	// --ui-addr, or fila.yaml: ui_addr.
	names func(keys ...string) string
}

// groupPlan is a runtime to build: its name ("" without --config), its
// configuration, and where the file declares it.
type groupPlan struct {
	name string
	cfg  runtime.Config
	at   *confNode
}

// newRuntimes builds every group's runtime; an error names the group.
func (p *workProcess) newRuntimes(log *zap.Logger, observer runtime.Observer, middleware ...runtime.Middleware) ([]group, error) {
	groups := make([]group, 0, len(p.groups))
	for _, gp := range p.groups {
		cfg := gp.cfg
		cfg.Middleware = append(slices.Clone(middleware), cfg.Middleware...)
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
	if ownProcess {
		adoptOrphans(log)
	}
	var m *metrics.Metrics
	if p.metricsAddr != "" {
		statsPool, err := newSmallPool(p.dsn, p.schema, 2)
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
	var middleware []runtime.Middleware
	if p.otel {
		mw, shutdown, err := startTracing(ctx, g.stdout)
		if err != nil {
			return err
		}
		// Spans still buffered are sent once every group has stopped.
		defer shutdown(log)
		middleware = append(middleware, mw)
	}
	groups, err := p.newRuntimes(log, observer, middleware...)
	if err != nil {
		return err
	}
	if m != nil {
		for _, gr := range groups {
			m.Attach(gr.rt)
		}
	}
	if p.metricsAddr != "" || p.healthAddr != "" {
		e, err := serveEndpoints(p.metricsAddr, p.healthAddr, p.names, m, readiness(groups), log)
		if err != nil {
			return err
		}
		// Scrapes and probes are answered until the worker has stopped.
		defer e.shutdown()
	}
	if p.uiAddr != "" {
		uiPool, err := newSmallPool(p.dsn, p.schema, uiPoolConns)
		if err != nil {
			return err
		}
		defer uiPool.Close()
		uiCtx, stopUI := context.WithCancel(context.Background())
		defer stopUI()
		wait, err := startDashboard(uiCtx, p.names("ui_addr"), p.uiAddr, p.uiAccess, uiPool, log)
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
// statements nor behind each other. With a schema, its search_path is
// that schema.
func newSmallPool(dsn, schema string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(dsn)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	if schema != "" {
		if err := runtime.UseSchema(cfg, schema); err != nil {
			return nil, fmt.Errorf("--schema: %w", err)
		}
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	return pool, nil
}

// execKinds are the handlers of a worker group: the built-in demo kinds
// and the commands of --exec or exec:.
func execKinds(execs []execSpec, stdout io.Writer) []runtime.Kind {
	kinds := builtinKinds()
	for _, e := range execs {
		kinds = append(kinds, runtime.Kind{Name: e.name, Handler: execHandler(e.command, stdout), Timeout: e.kindTimeout(), Limit: e.kindLimit(),
			RateLimit: e.kindRateLimit()})
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
