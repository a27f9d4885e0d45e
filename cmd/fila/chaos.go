package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/internal/chaos"
	"github.com/fila-run/fila/internal/duration"
	"github.com/fila-run/fila/internal/patroni"
	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/pgcluster"
)

func init() {
	register("chaos", "inject real faults (kill -9, SIGSTOP, restarts, half-open listener, Patroni switchover and failover, …) into workers on a throwaway PostgreSQL and check nothing is lost", runChaos)
}

func runChaos(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var names []string
	for _, sc := range chaos.Scenarios() {
		names = append(names, sc.Name)
	}
	jobs := fs.Int("jobs", chaos.JobsDefault, "jobs each drain runs (the restart and lock-wait scenarios; the others scale from it within their bounds); 100000 for the full-size run")
	workers := fs.Int("workers", chaos.WorkersDefault, "runtimes draining at once")
	only := fs.String("scenarios", "all", "comma-separated scenarios to run: "+strings.Join(names, ", "))
	pooled := fs.Bool("pgbouncer", false, "route every worker's main DSN through the throwaway PgBouncer (transaction mode); listeners stay direct")
	markdown := fs.Bool("markdown", false, "print the table as Markdown")
	logPath := fs.String("log", "", "append the workers' warnings and errors, as JSON lines, to this file")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *jobs < 100 {
		return fmt.Errorf("--jobs %d: want at least 100", *jobs)
	}
	if *workers < 1 || *workers > 64 {
		return fmt.Errorf("--workers %d: want 1 to 64", *workers)
	}
	var selected []chaos.Scenario
	if *only == "all" {
		selected = chaos.Scenarios()
	} else {
		for _, n := range strings.Split(*only, ",") {
			sc, ok := chaos.Lookup(strings.TrimSpace(n))
			if !ok {
				return fmt.Errorf("--scenarios: no scenario %q (have %s)", n, strings.Join(names, ", "))
			}
			selected = append(selected, sc)
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the fila binary for the worker processes: %w", err)
	}
	logger := zap.NewNop()
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--log: %w", err)
		}
		defer f.Close()
		logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(logEncoderConfig()), zapcore.AddSync(f), zapcore.WarnLevel))
		defer func() { _ = logger.Sync() }()
	}
	progress := func(format string, args ...any) { fmt.Fprintf(g.stderr, "fila chaos: "+format+"\n", args...) }

	// A PostgreSQL and a PgBouncer of its own: the scenarios restart them.
	progress("starting a throwaway PostgreSQL and PgBouncer")
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cluster, err := pgcluster.Start(sctx, pgcluster.Options{Fast: true, Logger: logger})
	if err != nil {
		if errors.Is(err, pgcluster.ErrNotInstalled) {
			return fmt.Errorf("needs the PostgreSQL server binaries: %w (run scripts/setup.sh)", err)
		}
		return fmt.Errorf("start a throwaway PostgreSQL: %w", err)
	}
	defer cluster.Close()
	bouncer, err := pgbouncer.Start(sctx, pgbouncer.Options{UpstreamPort: cluster.Port(), Logger: logger})
	if err != nil {
		return fmt.Errorf("start a throwaway PgBouncer: %w", err)
	}
	defer bouncer.Close()
	env := &chaos.Env{AdminDSN: cluster.DSN("postgres"), Cluster: cluster, Bouncer: bouncer, FilaBin: bin, Logger: logger}
	if needsPatroni(selected) {
		// The high-availability scenarios run on a replicated cluster of
		// their own; without Patroni installed they report that they could
		// not run, and the others run as usual.
		progress("starting a throwaway Patroni cluster (etcd, a primary and its synchronous standby)")
		ha, err := patroni.Start(sctx, patroni.Options{Logger: logger})
		switch {
		case errors.Is(err, patroni.ErrNotInstalled):
			progress("no Patroni cluster: %v (run scripts/setup.sh)", err)
		case err != nil:
			return fmt.Errorf("start a throwaway Patroni cluster: %w", err)
		default:
			defer ha.Close()
			env.Patroni = ha
		}
	}
	if *pooled {
		env.PoolerDSN = bouncer.DSN("postgres")
	}
	machine := describeChaosMachine(ctx, env.AdminDSN)
	size := chaos.Size{Jobs: *jobs, Workers: *workers}
	progress("%d scenarios; drains of %d jobs by %d runtimes; %s", len(selected), size.Jobs, size.Workers, machine)

	var results []*chaos.Result
	failed := 0
	for i, sc := range selected {
		name := sc.Name
		env.Progress = func(line string) { progress("[%d/%d %s] %s", i+1, len(selected), name, line) }
		env.Progress("starting: " + sc.Fault)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Minute+time.Duration(size.Jobs)*20*time.Millisecond)
		res, err := chaos.Run(rctx, env, sc, size)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			res = &chaos.Result{Name: sc.Name, Fault: sc.Fault, Load: "—", Lost: chaos.NA, Duplicated: chaos.NA, Overlapping: chaos.NA,
				Failures: []string{"could not run: " + oneLineError(err)}}
		}
		if res.OK() {
			env.Progress(fmt.Sprintf("ok (%s)", duration.Format(res.Took)))
		} else {
			failed++
			env.Progress(fmt.Sprintf("FAILED: %s", strings.Join(res.Failures, "; ")))
		}
		results = append(results, res)
	}

	via := "direct"
	if *pooled {
		via = "through PgBouncer (transaction mode)"
	}
	fmt.Fprintf(g.stdout, "fila chaos --jobs %d --workers %d: main DSNs %s; %s\n\n", size.Jobs, size.Workers, via, machine)
	if err := chaos.WriteTable(g.stdout, results, *markdown); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios failed", failed, len(results))
	}
	return nil
}

// needsPatroni reports whether any of scenarios runs on a Patroni cluster.
func needsPatroni(scenarios []chaos.Scenario) bool {
	for _, sc := range scenarios {
		if chaos.NeedsPatroni(sc.Name) {
			return true
		}
	}
	return false
}

// describeChaosMachine names the host and the throwaway server's settings.
func describeChaosMachine(ctx context.Context, dsn string) string {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return "machine unknown"
	}
	defer pool.Close()
	m, _ := report.DescribeMachine(ctx, pool)
	return m.String()
}
