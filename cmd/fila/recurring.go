package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/fila-run/fila/runtime"
)

func init() {
	register("recurring", "list the recurring tasks workers schedule, with each one's last and next slot: recurring list", runRecurring)
	describeArgs("recurring", "list")
}

func runRecurring(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("recurring", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "list" {
		return g.usageError("say list")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	tasks, err := runtime.RecurringTasks(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(g.stdout, tasks)
	}
	if len(tasks) == 0 {
		fmt.Fprintln(g.stdout, "no recurring task: declare them in a worker's configuration")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSCHEDULE\tZONE\tKIND\tQUEUE\tMISSED\tLAST SLOT\tLAST JOB\tNEXT SLOT")
	for _, t := range tasks {
		last, job, next := "never", "-", "-"
		if t.LastSlot != nil {
			last = t.LastSlot.UTC().Format(time.RFC3339)
		}
		if t.LastJobID != nil {
			job = fmt.Sprint(*t.LastJobID)
		}
		if t.NextSlot != nil {
			next = t.NextSlot.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Schedule, t.TimeZone, t.Kind, t.Queue, t.Missed, last, job, next)
	}
	return tw.Flush()
}
