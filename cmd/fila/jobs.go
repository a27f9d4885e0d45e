package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

// jobsCommand is one subcommand of `fila jobs`.
type jobsCommand struct {
	name, args, summary string
	run                 func(ctx context.Context, g *globals, args []string) error
}

var jobsCommands = []jobsCommand{
	{"list", "[--state S] [--kind K] [--queue Q] [--limit N] [--before ID]", "list jobs, newest first", runJobsList},
	{"show", "ID", "show one job: payload, attempts, times and every attempt's error", runJobsShow},
	{"retry", "ID… | --state dead|cancelled [--kind K] [--queue Q]", "put dead or cancelled jobs back to pending, due now, attempts reset", runJobsRetry},
	{"cancel", "ID…", "cancel pending or running jobs (a running one is stopped within a heartbeat)", runJobsCancel},
	{"delete", "ID…", "delete jobs that are not running", runJobsDelete},
}

func init() {
	register("jobs", "list, show, retry, cancel and delete jobs: jobs list|show|retry|cancel|delete", runJobs)
	describeArgs("jobs", "list|show|retry|cancel|delete")
	for _, c := range jobsCommands {
		describeArgs("jobs "+c.name, c.args)
	}
}

func runJobs(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		for _, c := range jobsCommands {
			if c.name == args[0] {
				g.name = "jobs " + c.name
				return c.run(ctx, g, args[1:])
			}
		}
	}
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		jobsUsage(g.stderr)
		return flag.ErrHelp
	case len(args) == 0:
		jobsUsage(g.stderr)
		return errUsage
	case strings.HasPrefix(args[0], "-"):
		return g.usageError("give the jobs command before its flags: fila jobs list|show|retry|cancel|delete [flags]")
	}
	return g.usageError("unknown jobs command %q: use list, show, retry, cancel or delete", args[0])
}

func jobsUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fila jobs <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range jobsCommands {
		fmt.Fprintf(w, "  %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nRun fila help jobs <command> for its flags.")
}

func runJobsList(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs list", flag.ContinueOnError)
	state := fs.String("state", "", "only jobs in this state: "+strings.Join(runtime.JobStates(), ", "))
	kind := fs.String("kind", "", "only jobs of this kind")
	queue := fs.String("queue", "", "only jobs of this queue")
	limit := fs.Int("limit", runtime.ListLimitDefault, fmt.Sprintf("most jobs to list, 1 to %d", runtime.ListLimitMax))
	before := fs.Int64("before", 0, "only jobs whose id is below this one (the next page: the last id listed); 0 for the newest")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *state != "" && !slices.Contains(runtime.JobStates(), *state) {
		return fmt.Errorf("--state %q is unknown: use %s", *state, strings.Join(runtime.JobStates(), ", "))
	}
	if *queue != "" {
		if err := channel.ValidateQueue(*queue); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
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
	jobs, err := runtime.ListJobs(ctx, pool, runtime.JobFilter{State: *state, Kind: *kind, Queue: *queue, BeforeID: *before, Limit: *limit})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(g.stdout, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(g.stdout, "no jobs")
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPTS\tRUN AT\tFINISHED\tLAST ERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.State, j.Attempts, j.MaxAttempts,
			listTime(&j.RunAt), listTime(j.FinishedAt), singleLine(j.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(jobs) == *limit {
		fmt.Fprintf(g.stdout, "(the newest %d; the next page: --before %d)\n", len(jobs), jobs[len(jobs)-1].ID)
	}
	return nil
}

func runJobsShow(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return g.usageError("give one job id")
	}
	ids, err := parseIDs(pos)
	if err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	j, err := runtime.GetJob(ctx, pool, ids[0])
	if errors.Is(err, runtime.ErrJobNotFound) {
		return fmt.Errorf("job %d does not exist", ids[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		// Payload and errors are always there, even when empty.
		return writeJSON(g.stdout, struct {
			*runtime.JobRow
			Payload json.RawMessage        `json:"payload"`
			Errors  []runtime.AttemptError `json:"errors"`
		}{j, j.Payload, j.Errors})
	}
	printJob(g.stdout, j)
	return nil
}

func printJob(w io.Writer, j *runtime.JobRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, value) }
	field("id", strconv.FormatInt(j.ID, 10))
	field("queue", j.Queue)
	field("kind", j.Kind)
	field("state", j.State)
	field("priority", fmt.Sprintf("%d (a lower number runs first)", j.Priority))
	field("attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	field("created at", showTime(&j.CreatedAt))
	field("run at", showTime(&j.RunAt))
	field("started at", showTime(j.StartedAt))
	field("finished at", showTime(j.FinishedAt))
	field("lease until", showTime(j.LeaseUntil))
	if j.LastError == "" {
		field("last error", "-")
	} else {
		field("last error", singleLine(j.LastError, 200))
	}
	tw.Flush()
	fmt.Fprintln(w, "payload:")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, j.Payload, "  ", "  "); err != nil {
		pretty.Reset()
		pretty.Write(j.Payload)
	}
	fmt.Fprintf(w, "  %s\n", pretty.String())
	if len(j.Errors) == 0 {
		fmt.Fprintln(w, "errors: none")
		return
	}
	fmt.Fprintln(w, "errors, oldest first (the latest 20 are kept):")
	for _, e := range j.Errors {
		fmt.Fprintf(w, "  attempt %d at %s:\n", e.Attempt, showTime(&e.At))
		for _, line := range strings.Split(strings.TrimRight(e.Error, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
}

func runJobsRetry(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs retry", flag.ContinueOnError)
	state := fs.String("state", "", "instead of ids: retry every job in this state, dead or cancelled")
	kind := fs.String("kind", "", "with --state: only jobs of this kind")
	queue := fs.String("queue", "", "with --state: only jobs of this queue")
	asJSON := fs.Bool("json", false, "print what was retried and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *state == "" {
		switch {
		case *kind != "" || *queue != "":
			return g.usageError("--kind and --queue select among --state dead or cancelled jobs: add --state")
		case len(pos) == 0:
			return g.usageError("give job ids, or --state dead|cancelled")
		}
		return changeByID(ctx, g, pos, *asJSON, "retried", runtime.Retry)
	}
	if len(pos) > 0 {
		return g.usageError("give job ids or --state, not both")
	}
	if *state != "dead" && *state != "cancelled" {
		return fmt.Errorf("--state %q: only dead or cancelled jobs can be retried", *state)
	}
	if *queue != "" {
		if err := channel.ValidateQueue(*queue); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := runtime.RetryWhere(ctx, pool, runtime.JobFilter{State: *state, Kind: *kind, Queue: *queue})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(g.stdout, res)
	}
	if len(res.Changed) == 0 {
		fmt.Fprintf(g.stdout, "no %s jobs to retry\n", *state)
		return nil
	}
	fmt.Fprintf(g.stdout, "retried %s: %s\n", plural(len(res.Changed), *state+" job"), idList(res.IDs()))
	printLaterRuns(g.stdout, res)
	return nil
}

func runJobsCancel(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs cancel", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print what was cancelled and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return g.usageError("give the ids of the jobs to cancel")
	}
	return changeByID(ctx, g, pos, *asJSON, "cancelled", runtime.Cancel)
}

func runJobsDelete(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs delete", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print what was deleted and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return g.usageError("give the ids of the jobs to delete")
	}
	return changeByID(ctx, g, pos, *asJSON, "deleted", runtime.Delete)
}

// changeByID runs a change on the jobs named on the command line, prints
// what it changed, and fails naming every job it left alone.
func changeByID(ctx context.Context, g *globals, args []string, asJSON bool, verb string,
	change func(context.Context, runtime.DB, ...int64) (runtime.ChangeResult, error)) error {
	ids, err := parseIDs(args)
	if err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := change(ctx, pool, ids...)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(g.stdout, res); err != nil {
			return err
		}
	} else if len(res.Changed) > 0 {
		fmt.Fprintf(g.stdout, "%s %s: %s\n", verb, plural(len(res.Changed), "job"), idList(res.IDs()))
		if verb == "cancelled" {
			for _, c := range res.Changed {
				if c.From == "running" {
					fmt.Fprintf(g.stdout, "job %d was running: its worker stops it at its next heartbeat\n", c.ID)
				}
			}
		}
		printLaterRuns(g.stdout, res)
	}
	return res.Err()
}

// printLaterRuns names the retried jobs that are due later than now.
func printLaterRuns(w io.Writer, res runtime.ChangeResult) {
	for _, c := range res.Changed {
		if c.RunsAt != nil {
			fmt.Fprintf(w, "job %d was cancelled while it ran: it runs again from %s, once that attempt's lease has ended\n",
				c.ID, showTime(c.RunsAt))
		}
	}
}

// parseIDs reads job ids, each a positive whole number.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%q is not a job id (a positive whole number)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// idList spells out up to 20 ids.
func idList(ids []int64) string {
	const most = 20
	parts := make([]string, 0, min(len(ids), most)+1)
	for i, id := range ids {
		if i == most {
			parts = append(parts, fmt.Sprintf("… and %d more", len(ids)-most))
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// listTime is a time in a listing: local, to the second; "-" for none.
func listTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// showTime is a time in `jobs show`: local, to the millisecond, with its
// zone; "-" for none.
func showTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

// singleLine folds s onto one line of at most n bytes, for a table cell.
func singleLine(s string, n int) string {
	return truncateString(strings.Join(strings.Fields(s), " "), n)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
