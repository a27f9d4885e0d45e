package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/fila-run/fila/runtime"
)

// workflowCommands are the subcommands of `fila workflow`, as jobsCommands
// are `fila jobs`'.
var workflowCommands = []jobsCommand{
	{"list", "[--limit N] [--before ID]", "list workflows, newest first, with their jobs counted by state", runWorkflowList},
	{"show", "ID", "show a workflow's steps in order: each job's state and the steps it waits for", runWorkflowShow},
	{"cancel", "ID", "cancel every job of a workflow that has not finished (running ones are stopped within a heartbeat)", runWorkflowCancel},
	{"retry", "ID", "run a workflow's dead and cancelled steps again, each after the steps it waits for; completed steps do not run again", runWorkflowRetry},
}

func init() {
	register("workflow", "list, show, cancel and retry workflows as units: workflow list|show|cancel|retry", runWorkflow)
	describeArgs("workflow", "list|show|cancel|retry")
	for _, c := range workflowCommands {
		describeArgs("workflow "+c.name, c.args)
	}
}

func runWorkflow(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		for _, c := range workflowCommands {
			if c.name == args[0] {
				g.name = "workflow " + c.name
				return c.run(ctx, g, args[1:])
			}
		}
	}
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		workflowUsage(g.stderr)
		return flag.ErrHelp
	case len(args) == 0:
		workflowUsage(g.stderr)
		return errUsage
	case strings.HasPrefix(args[0], "-"):
		return g.usageError("give the workflow command before its flags: fila workflow list|show|cancel|retry [flags]")
	}
	return g.usageError("unknown workflow command %q: use list, show, cancel or retry", args[0])
}

func workflowUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fila workflow <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range workflowCommands {
		fmt.Fprintf(w, "  %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nA workflow's id is the id of its first job; fila jobs show prints it for each of its jobs.")
}

// workflowID reads the one workflow id of a command's arguments.
func workflowID(g *globals, pos []string) (int64, error) {
	if len(pos) != 1 {
		return 0, g.usageError("give one workflow id")
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("%q is not a workflow id (a positive whole number: the id of its first job)", pos[0])
	}
	return id, nil
}

// workflowNotFound names the id of a workflow that does not exist.
func workflowNotFound(id int64, err error) error {
	if errors.Is(err, runtime.ErrWorkflowNotFound) {
		return fmt.Errorf("workflow %d does not exist (no job carries its id: it was never inserted, or its jobs were deleted)", id)
	}
	return err
}

// stateCounts prints a workflow's jobs per state, in a job's life order.
func stateCounts(counts map[string]int) string {
	var parts []string
	for _, s := range runtime.JobStates() {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}

func runWorkflowList(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("workflow list", flag.ContinueOnError)
	limit := fs.Int("limit", runtime.ListLimitDefault, fmt.Sprintf("most workflows to list, 1 to %d", runtime.ListLimitMax))
	before := fs.Int64("before", 0, "only workflows whose id is below this one (the next page: the last id listed); 0 for the newest")
	asJSON := fs.Bool("json", false, "print a JSON array")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return g.usageError("list takes no argument (fila workflow show ID shows one)")
	}
	if *limit < 1 || *limit > runtime.ListLimitMax {
		return fmt.Errorf("--limit %d out of range: allowed 1 to %d", *limit, runtime.ListLimitMax)
	}
	if *before < 0 {
		return fmt.Errorf("--before %d is negative", *before)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := runtime.ListWorkflows(ctx, pool, runtime.WorkflowFilter{BeforeID: *before, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(g.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(g.stdout, "no workflows")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tJOBS\tCREATED\tFINISHED\tBY STATE")
	for _, w := range list {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", w.ID, w.State, w.Jobs, listTime(&w.CreatedAt), listTime(w.FinishedAt), stateCounts(w.Counts))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == *limit {
		fmt.Fprintf(g.stdout, "(the newest %d; the next page: --before %d)\n", len(list), list[len(list)-1].ID)
	}
	return nil
}

func runWorkflowShow(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("workflow show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := workflowID(g, pos)
	if err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := runtime.GetWorkflow(ctx, pool, id)
	if err != nil {
		return workflowNotFound(id, err)
	}
	if *asJSON {
		return writeJSON(g.stdout, w)
	}
	fmt.Fprintf(g.stdout, "workflow %d: %s, %s (%s)\n", w.ID, w.State, plural(w.Jobs, "job"), stateCounts(w.Counts))
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tJOB\tKIND\tSTATE\tATTEMPTS\tAFTER\tFINISHED\tLAST ERROR")
	for _, s := range w.Steps {
		after := "-"
		if len(s.After) > 0 {
			after = termLine(strings.Join(s.After, ","))
		}
		step := s.WorkflowStep
		if step == "" {
			step = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", termLine(step), s.ID, termLine(s.Kind), s.State,
			s.Attempts, s.MaxAttempts, after, listTime(s.FinishedAt), singleLine(s.LastError, 60))
	}
	return tw.Flush()
}

func runWorkflowCancel(ctx context.Context, g *globals, args []string) error {
	return changeWorkflow(ctx, g, "workflow cancel", args, "cancelled", runtime.CancelWorkflow)
}

func runWorkflowRetry(ctx context.Context, g *globals, args []string) error {
	return changeWorkflow(ctx, g, "workflow retry", args, "retried", runtime.RetryWorkflow)
}

// changeWorkflow cancels or retries a workflow and prints one line per job
// it changed; the jobs it left alone fail the command, each with its
// reason, as fila jobs does.
func changeWorkflow(ctx context.Context, g *globals, name string, args []string, past string,
	change func(context.Context, runtime.DB, int64) (runtime.ChangeResult, error)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print what changed as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	id, err := workflowID(g, pos)
	if err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := change(ctx, pool, id)
	if err != nil {
		return workflowNotFound(id, err)
	}
	if *asJSON {
		if err := writeJSON(g.stdout, res); err != nil {
			return err
		}
		return refusedError(res)
	}
	if len(res.Changed) == 0 && len(res.Skipped) == 0 {
		what := "no job left to cancel: every one has finished"
		if past == "retried" {
			what = "no dead or cancelled job to retry"
		}
		fmt.Fprintf(g.stdout, "workflow %d: %s\n", id, what)
		return nil
	}
	for _, c := range res.Changed {
		line := fmt.Sprintf("job %d: %s (was %s", c.ID, past, c.From)
		switch {
		case past == "cancelled" && c.From == runtime.StateRunning:
			line += ": its worker stops it at its next heartbeat"
		case c.To == runtime.StateWaiting:
			line += "; waits for the steps before it"
		case c.RunsAt != nil:
			line += fmt.Sprintf(" while it ran: it runs again from %s, once that attempt's lease has ended", showTime(c.RunsAt))
		}
		fmt.Fprintln(g.stdout, line+")")
	}
	return refusedError(res)
}
