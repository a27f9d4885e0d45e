package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/riverimport"
)

func init() {
	register("import", "move another queue's jobs into Fila: import river (River's river_job table)", runImport)
	describeArgs("import", "river")
}

func runImport(ctx context.Context, g *globals, args []string) error {
	switch {
	case len(args) > 0 && args[0] == "river":
		g.name = "import river"
		return runImportRiver(ctx, g, args[1:])
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		importUsage(g.stderr)
		return flag.ErrHelp
	case len(args) == 0:
		importUsage(g.stderr)
		return errUsage
	case strings.HasPrefix(args[0], "-"):
		return g.usageError("give the source before its flags: fila import river [flags]")
	}
	return g.usageError("unknown source %q: fila imports from river", args[0])
}

func importUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fila import <source> [flags]")
	fmt.Fprintln(w, "\nsources:")
	fmt.Fprintln(w, "  river\n        River's jobs (river_job) into fila_jobs, in batches, each in one transaction; safe to run twice")
	fmt.Fprintln(w, "\nRun fila help import river for its flags.")
}

func runImportRiver(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("import river", flag.ContinueOnError)
	from := fs.String("from", "", "DSN of the database River's tables are in (default: the Fila database, --dsn); with another database, --delete deletes each batch after it commits in Fila")
	schema := fs.String("river-schema", "", "schema of River's tables (default: the connection's search_path)")
	batch := fs.Int("batch-size", riverimport.BatchSizeDefault, fmt.Sprintf("River jobs moved per transaction, 1 to %d", riverimport.BatchSizeMax))
	dryRun := fs.Bool("dry-run", false, "read and check every job that would move, print the counts per state and kind, and write nothing")
	running := fs.Bool("include-running", false, "import River's running jobs as retryable (pending, due now, the interrupted attempt counted; one out of attempts as dead). "+
		"Only once every River worker has stopped, or a job may run in both: without it the import refuses while River has running jobs")
	finished := fs.Bool("include-finished", false, "import completed, cancelled and discarded jobs too, as Fila's completed, cancelled and dead (default: they stay in River)")
	del := fs.Bool("delete", false, "delete each moved job from river_job, in the batch's transaction when River is in the Fila database (default: River's rows stay)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *batch < 1 || *batch > riverimport.BatchSizeMax {
		return g.usageError("--batch-size %d out of range: allowed 1 to %d", *batch, riverimport.BatchSizeMax)
	}
	if *dryRun && *del {
		return g.usageError("--dry-run deletes nothing: give --dry-run or --delete, not both")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := riverimport.Config{
		Schema: *schema, BatchSize: *batch, IncludeRunning: *running, IncludeFinished: *finished,
		Delete: *del, DryRun: *dryRun, Logger: g.log(),
	}
	river := pool
	if *from != "" {
		if river, err = openFrom(ctx, *from); err != nil {
			return err
		}
		defer river.Close()
		cfg.River = river
	}
	start := time.Now()
	rep, err := riverimport.Import(ctx, pool, cfg)
	if rep != nil && (err == nil || rep.Batches > 0) {
		printImport(g.stdout, rep, time.Since(start))
	}
	return err
}

// openFrom opens River's database and checks that it answers.
func openFrom(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(dsn)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("--from: cannot reach River's database at %s: %w", describe(cfg), err)
	}
	return pool, nil
}

func printImport(w io.Writer, rep *riverimport.Report, took time.Duration) {
	verb := "moved"
	if rep.DryRun {
		verb = "would move (dry run: nothing written)"
	}
	fmt.Fprintf(w, "%s %d River jobs in %s", verb, rep.MovedTotal(), took.Round(time.Millisecond))
	if !rep.DryRun && rep.MovedTotal() > 0 && took > 0 {
		fmt.Fprintf(w, " (%.0f jobs/s)", float64(rep.MovedTotal())/took.Seconds())
	}
	fmt.Fprintln(w)
	if len(rep.Moved) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RIVER STATE\tKIND\tFILA STATE\tJOBS")
		for _, c := range rep.Moved {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", c.State, c.Kind, c.To, c.Jobs)
		}
		_ = tw.Flush()
	}
	if rep.AlreadyImported > 0 {
		fmt.Fprintf(w, "%d found imported already: not moved again\n", rep.AlreadyImported)
	}
	for _, l := range rep.Left {
		fmt.Fprintf(w, "left in River: %d %s (%s)\n", l.Jobs, l.State, l.Reason)
	}
	if rep.Deleted > 0 {
		fmt.Fprintf(w, "deleted %d rows from river_job\n", rep.Deleted)
	} else if !rep.DryRun {
		fmt.Fprintln(w, "River's rows stay in river_job (--delete removes them)")
	}
}
