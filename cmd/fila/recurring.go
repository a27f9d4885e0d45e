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
	register("recurring", "list the recurring tasks workers schedule, with each one's last and next slot and live schedulers, or forget one no worker schedules: recurring list | delete TASK", runRecurring)
	describeArgs("recurring", "list | delete TASK")
}

func runRecurring(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("recurring", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 2 && pos[0] == "delete":
	case len(pos) == 1 && pos[0] == "list":
	case len(pos) > 0 && pos[0] == "delete":
		return g.usageError("delete takes one task name")
	default:
		return g.usageError("say list, or delete TASK")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if pos[0] == "delete" {
		deleted, err := runtime.DeleteRecurringTask(ctx, pool, pos[1])
		switch {
		case err != nil:
			return err
		case !deleted:
			return fmt.Errorf("no recurring task is named %q (fila recurring list shows them)", pos[1])
		}
		fmt.Fprintf(g.stdout, "deleted recurring task %s; its jobs stay\n", termLine(pos[1]))
		return nil
	}
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
	fmt.Fprintln(tw, "TASK\tSCHEDULE\tZONE\tKIND\tQUEUE\tMISSED\tLAST SLOT\tLAST JOB\tNEXT SLOT\tSCHEDULERS")
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
		schedulers := fmt.Sprint(t.Schedulers)
		if t.Orphaned {
			// No job comes at the next slot: it is no promise.
			next, schedulers = "-", "0 (orphaned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", singleLine(t.Name, 200), singleLine(t.Schedule, 100),
			singleLine(t.TimeZone, 100), singleLine(t.Kind, 200), singleLine(t.Queue, 100), singleLine(string(t.Missed), 20), last, job, next, schedulers)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range tasks {
		if t.Orphaned {
			fmt.Fprintf(g.stdout, "task %s is orphaned: no live worker schedules it, so no job is enqueued for it; start a worker that declares it, or forget it with fila recurring delete %s\n",
				singleLine(t.Name, 200), singleLine(t.Name, 200))
		}
	}
	return nil
}
