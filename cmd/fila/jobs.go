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
	"github.com/fila-run/fila/internal/jsonpreview"
	"github.com/fila-run/fila/runtime"
)

// jobsCommand is one subcommand of `fila jobs`.
type jobsCommand struct {
	name, args, summary string
	run                 func(ctx context.Context, g *globals, args []string) error
}

var jobsCommands = []jobsCommand{
	{"list", "[--state S,…] [--kind K,…] [--queue Q,…] [--tag T,…] [--any-tag T,…] [--payload JSON] [--workflow ID] [--order id|run_at|created_at|priority] [--asc] [--limit N] [--cursor C | --before ID]", "list jobs, newest first unless --order or --asc say otherwise", runJobsList},
	{"show", "ID [--payload]", "show one job: payload, attempts, times and every attempt's error; --payload prints the payload alone, whole", runJobsShow},
	{"retry", "ID… | --state dead|cancelled|completed|scheduled [--kind K] [--queue Q]", "run jobs that are not running again, due now: dead, cancelled and completed ones with attempts reset, scheduled ones made due now", runJobsRetry},
	{"update", "ID [--priority N] [--run-at now|+DURATION|TIME] [--tags T,…] [--meta K=V]… [--max-attempts N]", "change a job that is not running: its priority, run_at, tags, metadata or attempt limit", runJobsUpdate},
	{"release", "ID…", "let held jobs (enqueued with --held) go: they become pending and run at once, or at their run_at", runJobsRelease},
	{"cancel", "ID… | --state held|waiting|pending|running|scheduled|retrying [--kind K] [--queue Q]", "cancel held, waiting, pending or running jobs (a running one is stopped within a heartbeat)", runJobsCancel},
	{"delete", "ID… | --state dead|cancelled|held|waiting|pending|scheduled|retrying [--kind K] [--queue Q]", "delete jobs that are not running", runJobsDelete},
	{"limits", "[--max-payload-bytes N] [--max-payload-depth N]", "show, or set, the largest and deepest payload the table accepts", runJobsLimits},
}

func init() {
	register("jobs", "list, show, retry, update, release, cancel and delete jobs, and their payload limits: jobs list|show|retry|update|release|cancel|delete|limits", runJobs)
	describeArgs("jobs", "list|show|retry|update|release|cancel|delete|limits")
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
		return g.usageError("give the jobs command before its flags: fila jobs list|show|retry|update|cancel|delete|limits [flags]")
	}
	return g.usageError("unknown jobs command %q: use list, show, retry, update, cancel, delete or limits", args[0])
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
	state := fs.String("state", "", "only jobs in these states, comma-separated: "+strings.Join(runtime.JobStates(), ", ")+
		"; or scheduled (pending, due later) or retrying (pending after a failed attempt)")
	kind := fs.String("kind", "", "only jobs of these kinds, comma-separated")
	queue := fs.String("queue", "", "only jobs of these queues, comma-separated")
	limit := fs.Int("limit", runtime.ListLimitDefault, fmt.Sprintf("most jobs to list, 1 to %d", runtime.ListLimitMax))
	before := fs.Int64("before", 0, "only jobs whose id is below this one (the next page of the newest first: the last id listed); 0 for the newest")
	tag := fs.String("tag", "", "only jobs with every one of these tags, comma-separated")
	tagsAny := fs.String("any-tag", "", "only jobs with at least one of these tags, comma-separated")
	payload := fs.String("payload", "", `only jobs whose payload contains this JSON (jsonb @>), e.g. '{"user": 7}'`)
	order := fs.String("order", runtime.OrderID, "sort by "+strings.Join(runtime.ListOrders(), ", ")+" (then by id)")
	asc := fs.Bool("asc", false, "sort from the lowest first (default: the highest, the newest for ids)")
	cursor := fs.String("cursor", "", "the next page: the cursor the last page printed (with the same flags)")
	meta := keyValues{}
	fs.Var(meta, "meta", "only jobs whose metadata has KEY=VALUE; repeat for more")
	workflow := fs.Int64("workflow", 0, "only the jobs of this workflow (its id: the id of its first job)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *workflow < 0 {
		return fmt.Errorf("--workflow %d is not a workflow id", *workflow)
	}
	states := commaList(*state)
	for _, s := range states {
		if !slices.Contains(runtime.ListStates(), s) {
			return fmt.Errorf("--state %q is unknown: use %s", s, strings.Join(runtime.ListStates(), ", "))
		}
	}
	queues := commaList(*queue)
	for _, q := range queues {
		if err := channel.ValidateQueue(q); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	if *limit < 1 || *limit > runtime.ListLimitMax {
		return fmt.Errorf("--limit %d out of range: allowed 1 to %d", *limit, runtime.ListLimitMax)
	}
	if *before < 0 {
		return fmt.Errorf("--before %d is negative", *before)
	}
	if !slices.Contains(runtime.ListOrders(), *order) {
		return fmt.Errorf("--order %q is unknown: use %s", *order, strings.Join(runtime.ListOrders(), ", "))
	}
	if *payload != "" && !json.Valid([]byte(*payload)) {
		return fmt.Errorf("--payload %q is not valid JSON", *payload)
	}
	byID := *order == runtime.OrderID && !*asc
	if *before > 0 && (*cursor != "" || !byID) {
		return g.usageError("--before pages the newest first: with --order, --asc or --cursor, page with --cursor")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	f := runtime.JobFilter{States: states, Kinds: commaList(*kind), Queues: queues, BeforeID: *before, Limit: *limit,
		TagsAll: commaList(*tag), TagsAny: commaList(*tagsAny), Payload: *payload, Cursor: *cursor, Ascending: *asc,
		WorkflowID: *workflow}
	if !byID {
		f.OrderBy = *order
	}
	if len(meta) > 0 {
		f.Metadata = meta.asAny()
	}
	page, err := runtime.ListJobsPage(ctx, pool, f)
	if err != nil {
		return err
	}
	jobs := page.Jobs
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, termLine(j.Queue), termLine(j.Kind), termLine(j.State),
			j.Attempts, j.MaxAttempts, listTime(&j.RunAt), listTime(j.FinishedAt), singleLine(j.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case page.Next == "":
	case byID && *cursor == "":
		fmt.Fprintf(g.stdout, "(the newest %d; the next page: --before %d)\n", len(jobs), jobs[len(jobs)-1].ID)
	default:
		fmt.Fprintf(g.stdout, "(%d listed; the next page: --cursor %s)\n", len(jobs), page.Next)
	}
	return nil
}

// commaList splits a flag's comma-separated values, without blanks.
func commaList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runJobsUpdate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs update", flag.ContinueOnError)
	priority := fs.Int("priority", 0, "the job's priority, -32768 to 32767 (lower runs first)")
	runAt := fs.String("run-at", "", "when the job may run: now, +DURATION from the database's now (+90s, +2h), or an RFC 3339 time")
	tags := fs.String("tags", "", "the job's tags, comma-separated, in place of its own ('' removes them)")
	maxAttempts := fs.Int("max-attempts", 0, "the job's attempt limit, 1 to 1000")
	meta := keyValues{}
	fs.Var(meta, "meta", "the job's metadata, in place of its own: KEY=VALUE, repeat for more")
	asJSON := fs.Bool("json", false, "print the job as it is now as JSON")
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
	var u runtime.JobUpdate
	if fsVisited(fs, "priority") {
		if *priority < -32768 || *priority > 32767 {
			return fmt.Errorf("--priority %d out of range: allowed -32768 to 32767", *priority)
		}
		p := int16(*priority)
		u.Priority = &p
	}
	if fsVisited(fs, "run-at") {
		u.RunAt = &time.Time{} // read below, on the database's clock
	}
	if fsVisited(fs, "tags") {
		t := commaList(*tags)
		u.Tags = &t
	}
	if fsVisited(fs, "max-attempts") {
		u.MaxAttempts = maxAttempts
	}
	if fsVisited(fs, "meta") {
		m := meta.asAny()
		u.Metadata = &m
	}
	if u == (runtime.JobUpdate{}) {
		return g.usageError("say what to change: --priority, --run-at, --tags, --meta or --max-attempts")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if u.RunAt != nil && *runAt != "now" {
		t, err := parseRunAt(ctx, pool, *runAt)
		if err != nil {
			return err
		}
		u.RunAt = &t
	}
	j, err := runtime.UpdateJob(ctx, pool, ids[0], u)
	if errors.Is(err, runtime.ErrJobNotFound) {
		return fmt.Errorf("job %d does not exist", ids[0])
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(g.stdout, j)
	}
	fmt.Fprintf(g.stdout, "job %d: updated (%s, priority %d, run at %s, at most %d attempts)\n", j.ID, j.State, j.Priority, showTime(&j.RunAt), j.MaxAttempts)
	return nil
}

// What `jobs show` reads and prints of a payload: the text shows its first
// showPayloadBytes, indented, and arrays and objects to showPayloadDepth
// levels, read from the first showPayloadRead bytes of the payload (room
// for what indentation adds and deep levels skip); --payload and --json
// stream it whole.
const (
	showPayloadBytes = 64 << 10
	showPayloadRead  = 2 * showPayloadBytes
	showPayloadDepth = 20
)

func runJobsShow(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON, the payload whole")
	rawPayload := fs.Bool("payload", false, "print the payload alone, whole, as JSON (to save it: > payload.json)")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return g.usageError("give one job id")
	}
	if *asJSON && *rawPayload {
		return g.usageError("give --json or --payload, not both")
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
	id := ids[0]
	notFound := func(err error) error {
		if errors.Is(err, runtime.ErrJobNotFound) {
			return fmt.Errorf("job %d does not exist", id)
		}
		return err
	}
	if *rawPayload {
		out := &terminalJSON{w: g.stdout}
		if _, err := runtime.WriteJobPayload(ctx, pool, id, out, nil); err != nil {
			return notFound(err)
		}
		if err := out.Flush(); err != nil {
			return err
		}
		_, err := io.WriteString(g.stdout, "\n")
		return err
	}
	read := showPayloadRead
	if *asJSON {
		read = 0 // streamed below
	}
	j, err := runtime.PreviewJob(ctx, pool, id, read)
	if err != nil {
		return notFound(err)
	}
	flow, err := runtime.GetJobFlow(ctx, pool, id)
	if err != nil {
		return notFound(err)
	}
	var fp *runtime.JobFlow
	if flow.Any {
		fp = &flow
	}
	if *asJSON {
		return writeJobJSON(ctx, g.stdout, pool, j, fp)
	}
	printJob(g.stdout, j)
	if fp != nil {
		printFlow(g.stdout, fp)
	}
	return nil
}

// printFlow prints a job's place in its flows: what it waits for and what
// waits for it, with their states, in id order.
func printFlow(w io.Writer, f *runtime.JobFlow) {
	fmt.Fprintln(w, "flow:")
	if f.WaitReason != "" {
		fmt.Fprintf(w, "  waiting: %s\n", termLine(f.WaitReason))
	}
	list := func(title string, jobs []runtime.FlowJob) {
		if len(jobs) == 0 {
			return
		}
		fmt.Fprintf(w, "  %s:\n", title)
		for _, d := range jobs {
			fmt.Fprintf(w, "    %d  %s  %s\n", d.ID, termLine(d.Kind), d.State)
		}
	}
	if len(f.Dependencies) > 0 {
		list(fmt.Sprintf("dependencies (if one ends dead or cancelled: %s)", f.DependencyFailure), f.Dependencies)
	}
	list("dependents", f.Dependents)
	if f.Sequence != "" {
		fmt.Fprintf(w, "  sequence: %s (when the job before is dead: %s)\n", termLine(f.Sequence), f.SequenceOnDead)
		if f.Before != nil {
			fmt.Fprintf(w, "    before: %d  %s  %s\n", f.Before.ID, termLine(f.Before.Kind), f.Before.State)
		}
		if f.After != nil {
			fmt.Fprintf(w, "    after:  %d  %s  %s\n", f.After.ID, termLine(f.After.Kind), f.After.State)
		}
	}
	if b := f.Batch; b != nil {
		printBatchLine(w, "  batch: ", b)
	}
}

// printBatchLine prints a batch's progress on one line.
func printBatchLine(w io.Writer, prefix string, b *runtime.Batch) {
	callback := "not yet"
	if b.CallbackID != nil {
		callback = "job " + strconv.FormatInt(*b.CallbackID, 10)
	}
	size := strconv.Itoa(b.Total)
	if !b.Sealed {
		size = strconv.Itoa(b.Jobs) + " so far (open)"
	}
	fmt.Fprintf(w, "%s%d: %s jobs, %d completed, %d dead, %d cancelled, %d unfinished; callback %s (%s)\n",
		prefix, b.ID, size, b.Completed, b.Dead, b.Cancelled, b.Unfinished, termLine(b.CallbackKind), callback)
}

// writeJobJSON prints a job as indented JSON, its payload streamed in
// whole (as PostgreSQL prints it, not indented: indenting a deeply nested
// payload is what makes it huge) at its place.
func writeJobJSON(ctx context.Context, w io.Writer, db runtime.DB, j *runtime.JobPreview, flow *runtime.JobFlow) error {
	// A NUL, escaped, can be in no string of the table's: its text is the
	// payload's place.
	const mark = `"\u0000"`
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	err := enc.Encode(struct {
		*runtime.JobRow
		// Payload and errors are always there, even when empty.
		Payload       json.RawMessage        `json:"payload"`
		Errors        []runtime.AttemptError `json:"errors"`
		ErrorsOmitted int                    `json:"errors_omitted,omitempty"`
		Flow          *runtime.JobFlow       `json:"flow,omitempty"`
	}{&j.JobRow, json.RawMessage(mark), j.Errors, j.ErrorsOmitted, flow})
	if err != nil {
		return err
	}
	before, after, ok := bytes.Cut(b.Bytes(), []byte(mark))
	if !ok {
		return errors.New("jobs show --json: the payload's place is missing")
	}
	if _, err := w.Write(jsonTerminalSafe(before)); err != nil {
		return err
	}
	out := &terminalJSON{w: w}
	if _, err := runtime.WriteJobPayload(ctx, db, j.ID, out, nil); err != nil {
		if errors.Is(err, runtime.ErrJobNotFound) {
			return fmt.Errorf("job %d was deleted while it was shown", j.ID)
		}
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	_, err = w.Write(jsonTerminalSafe(after))
	return err
}

func printJob(w io.Writer, j *runtime.JobPreview) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, value) }
	field("id", strconv.FormatInt(j.ID, 10))
	field("queue", termLine(j.Queue))
	field("kind", termLine(j.Kind))
	field("state", termLine(j.State))
	field("priority", fmt.Sprintf("%d (a lower number runs first)", j.Priority))
	field("attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	field("created at", showTime(&j.CreatedAt))
	field("run at", showTime(&j.RunAt))
	field("started at", showTime(j.StartedAt))
	field("finished at", showTime(j.FinishedAt))
	if j.State == runtime.StateRunning && j.StartedAt != nil {
		field("running for", seconds(j.Now.Sub(*j.StartedAt).Seconds()))
	}
	field("lease until", showTime(j.LeaseUntil))
	switch {
	case j.Worker == "":
		field("worker", "-")
	case j.State == runtime.StateRunning:
		field("worker", termLine(j.Worker))
	default:
		field("worker", termLine(j.Worker)+" (its last attempt's)")
	}
	if j.LastError == "" {
		field("last error", "-")
	} else {
		field("last error", singleLine(j.LastError, 200))
	}
	if j.WorkflowID != nil {
		field("workflow", fmt.Sprintf("%d, step %s (fila workflow show %d)", *j.WorkflowID, termLine(j.WorkflowStep), *j.WorkflowID))
	}
	if len(j.Tags) > 0 {
		field("tags", termLine(strings.Join(j.Tags, ", ")))
	}
	if j.Metadata != nil {
		field("metadata", termLine(singleLine(string(j.Metadata), 400)))
	}
	if j.Policy != nil {
		// The job's own timeout and retry (InsertOpts), beside the kind's.
		field("policy", termLine(singleLine(string(j.Policy), 400)))
	}
	if j.Output != nil {
		field("output", termLine(singleLine(string(j.Output), 400)))
	}
	tw.Flush()
	fmt.Fprintln(w, "payload:")
	p := jsonpreview.Indent([]byte(j.PayloadText), !j.PayloadCut, "  ", "  ",
		jsonpreview.Limits{MaxBytes: showPayloadBytes, MaxDepth: showPayloadDepth})
	fmt.Fprintf(w, "  %s\n", termText(p.Text))
	switch {
	case p.Cut && p.Elided:
		fmt.Fprintf(w, "  … cut: the payload is %d bytes, shown up to %d bytes indented and %d levels deep ([…] and {…} stand for deeper ones); fila jobs show --payload %d prints it whole\n",
			j.PayloadBytes, showPayloadBytes, showPayloadDepth, j.ID)
	case p.Cut:
		fmt.Fprintf(w, "  … cut: the payload is %d bytes, shown up to %d bytes indented; fila jobs show --payload %d prints it whole\n",
			j.PayloadBytes, showPayloadBytes, j.ID)
	case p.Elided:
		fmt.Fprintf(w, "  ([…] and {…} stand for arrays and objects nested deeper than %d levels; fila jobs show --payload %d prints them)\n",
			showPayloadDepth, j.ID)
	}
	if len(j.Errors) == 0 {
		fmt.Fprintln(w, "errors: none")
		return
	}
	if j.ErrorsOmitted > 0 {
		fmt.Fprintf(w, "errors, oldest first (the latest %d shown; %d older ones, written by hand, are not):\n", len(j.Errors), j.ErrorsOmitted)
	} else {
		fmt.Fprintln(w, "errors, oldest first (the latest 20 are kept):")
	}
	for _, e := range j.Errors {
		fmt.Fprintf(w, "  attempt %d at %s:\n", e.Attempt, showTime(&e.At))
		for _, line := range strings.Split(strings.TrimRight(e.Error, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", termText(line))
		}
	}
}

func runJobsRetry(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs retry", flag.ContinueOnError)
	state := fs.String("state", "", "instead of ids: retry every job in this state: "+strings.Join(runtime.RetryStates(), ", "))
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
			return g.usageError("--kind and --queue select among --state %s jobs: add --state", strings.Join(runtime.RetryStates(), "|"))
		case len(pos) == 0:
			return g.usageError("give job ids, or --state %s", strings.Join(runtime.RetryStates(), "|"))
		}
		return changeByID(ctx, g, pos, *asJSON, "retried", runtime.Retry)
	}
	if len(pos) > 0 {
		return g.usageError("give job ids or --state, not both")
	}
	if !slices.Contains(runtime.RetryStates(), *state) {
		return fmt.Errorf("--state %q: only %s jobs can be retried by state", *state, strings.Join(runtime.RetryStates(), ", "))
	}
	return changeWhere(ctx, g, runtime.JobFilter{State: *state, Kind: *kind, Queue: *queue}, *asJSON, "retry", "retried", runtime.RetryWhere)
}

// changeWhere runs a change on the jobs f selects, prints what it changed
// as changeByID does, and fails naming every job it left alone.
func changeWhere(ctx context.Context, g *globals, f runtime.JobFilter, asJSON bool, verb, past string,
	change func(context.Context, runtime.DB, runtime.JobFilter) (runtime.ChangeResult, error)) error {
	if f.Queue != "" {
		if err := channel.ValidateQueue(f.Queue); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := change(ctx, pool, f)
	if err != nil {
		return err
	}
	switch {
	case asJSON:
		if err := writeJSON(g.stdout, res); err != nil {
			return err
		}
	case len(res.Changed) == 0 && len(res.Skipped) == 0:
		fmt.Fprintf(g.stdout, "no %s jobs to %s\n", f.State, verb)
	case len(res.Changed) > 0:
		fmt.Fprintf(g.stdout, "%s %s: %s\n", past, plural(len(res.Changed), f.State+" job"), idList(res.IDs()))
		printRunning(g.stdout, past, res)
		printLaterRuns(g.stdout, res)
	}
	return refusedError(res)
}

// stateFlags are the flags that select jobs by state instead of by id.
type stateFlags struct{ state, kind, queue *string }

func addStateFlags(fs *flag.FlagSet, verb, states string) stateFlags {
	return stateFlags{
		state: fs.String("state", "", "instead of ids: "+verb+" every job in this state, "+states),
		kind:  fs.String("kind", "", "with --state: only jobs of this kind"),
		queue: fs.String("queue", "", "with --state: only jobs of this queue"),
	}
}

// byState says whether the jobs are selected by --state, and refuses ids
// and --state together, or neither, or --kind and --queue without --state.
func (sf stateFlags) byState(g *globals, pos []string, states string) (bool, error) {
	switch {
	case *sf.state == "" && (*sf.kind != "" || *sf.queue != ""):
		return false, g.usageError("--kind and --queue select among --state %s jobs: add --state", states)
	case *sf.state == "" && len(pos) == 0:
		return false, g.usageError("give job ids, or --state %s", states)
	case *sf.state != "" && len(pos) > 0:
		return false, g.usageError("give job ids or --state, not both")
	}
	return *sf.state != "", nil
}

func (sf stateFlags) filter() runtime.JobFilter {
	return runtime.JobFilter{State: *sf.state, Kind: *sf.kind, Queue: *sf.queue}
}

func runJobsRelease(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs release", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print what was released and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("give the ids of the held jobs to release")
	}
	return changeByID(ctx, g, pos, *asJSON, "released", runtime.Release)
}

func runJobsCancel(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs cancel", flag.ContinueOnError)
	states := strings.Join(runtime.CancelStates(), "|")
	sf := addStateFlags(fs, "cancel", "held, waiting (for dependencies or a sequence), pending, running, scheduled (pending, due later) or retrying (pending after a failed attempt)")
	asJSON := fs.Bool("json", false, "print what was cancelled and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	byState, err := sf.byState(g, pos, states)
	if err != nil {
		return err
	}
	if byState {
		if !slices.Contains(runtime.CancelStates(), *sf.state) {
			return fmt.Errorf("--state %q: only held, waiting, pending, running, scheduled or retrying jobs can be cancelled", *sf.state)
		}
		return changeWhere(ctx, g, sf.filter(), *asJSON, "cancel", "cancelled", runtime.CancelWhere)
	}
	return changeByID(ctx, g, pos, *asJSON, "cancelled", runtime.Cancel)
}

func runJobsDelete(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs delete", flag.ContinueOnError)
	states := strings.Join(runtime.DeleteStates(), "|")
	sf := addStateFlags(fs, "delete", "dead, cancelled, held, waiting, pending, scheduled or retrying (completed jobs go by retention)")
	asJSON := fs.Bool("json", false, "print what was deleted and skipped as JSON")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	byState, err := sf.byState(g, pos, states)
	if err != nil {
		return err
	}
	if byState {
		if !slices.Contains(runtime.DeleteStates(), *sf.state) {
			return fmt.Errorf("--state %q: only dead, cancelled, held, waiting, pending, scheduled or retrying jobs can be deleted by state (running ones: cancel them first; completed ones: retention deletes them)", *sf.state)
		}
		return changeWhere(ctx, g, sf.filter(), *asJSON, "delete", "deleted", runtime.DeleteWhere)
	}
	return changeByID(ctx, g, pos, *asJSON, "deleted", runtime.Delete)
}

func runJobsLimits(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("jobs limits", flag.ContinueOnError)
	maxBytes := fs.Int("max-payload-bytes", 0, fmt.Sprintf("set the most bytes a payload's JSON text may take, %d to %d (default at migration: %d)",
		runtime.PayloadMaxBytesMin, runtime.PayloadMaxBytesMax, runtime.PayloadMaxBytesDefault))
	maxDepth := fs.Int("max-payload-depth", 0, fmt.Sprintf("set how deep a payload's arrays and objects may nest, %d to %d (default at migration: %d)",
		runtime.PayloadMaxDepthMin, runtime.PayloadMaxDepthMax, runtime.PayloadMaxDepthDefault))
	asJSON := fs.Bool("json", false, "print the limits as JSON")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	setBytes, setDepth := fsVisited(fs, "max-payload-bytes"), fsVisited(fs, "max-payload-depth")
	if setBytes && (*maxBytes < runtime.PayloadMaxBytesMin || *maxBytes > runtime.PayloadMaxBytesMax) {
		return fmt.Errorf("--max-payload-bytes %d out of range: allowed %d to %d", *maxBytes, runtime.PayloadMaxBytesMin, runtime.PayloadMaxBytesMax)
	}
	if setDepth && (*maxDepth < runtime.PayloadMaxDepthMin || *maxDepth > runtime.PayloadMaxDepthMax) {
		return fmt.Errorf("--max-payload-depth %d out of range: allowed %d to %d", *maxDepth, runtime.PayloadMaxDepthMin, runtime.PayloadMaxDepthMax)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	limits, enforced, err := runtime.TablePayloadLimits(ctx, pool)
	if err != nil {
		return err
	}
	if setBytes || setDepth {
		if !enforced {
			limits = runtime.PayloadLimits{} // the defaults, for what is not given
		}
		if setBytes {
			limits.MaxBytes = *maxBytes
		}
		if setDepth {
			limits.MaxDepth = *maxDepth
		}
		if err := runtime.SetTablePayloadLimits(ctx, pool, limits); err != nil {
			return err
		}
		if limits, enforced, err = runtime.TablePayloadLimits(ctx, pool); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(g.stdout, struct {
			Enforced bool `json:"enforced"`
			MaxBytes int  `json:"max_payload_bytes,omitempty"`
			MaxDepth int  `json:"max_payload_depth,omitempty"`
		}{enforced, limits.MaxBytes, limits.MaxDepth})
	}
	if !enforced {
		fmt.Fprintln(g.stdout, "no payload limits: the table's trigger fila_jobs_payload_limits is dropped or disabled; set them with --max-payload-bytes and --max-payload-depth")
		return nil
	}
	fmt.Fprintf(g.stdout, "a payload may take at most %d bytes as JSON text and nest at most %d deep (checked by the table's trigger fila_jobs_payload_limits on every insert)\n",
		limits.MaxBytes, limits.MaxDepth)
	return nil
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
		return refusedError(res)
	}
	// One line per job, in the order given: what was done, or (on stderr,
	// from refusedError) why not.
	for _, c := range res.Changed {
		line := fmt.Sprintf("job %d: %s (was %s", c.ID, verb, c.From)
		switch {
		case verb == "cancelled" && c.From == runtime.StateRunning:
			line += ": its worker stops it at its next heartbeat"
		case verb == "released" && c.RunsAt != nil:
			line += fmt.Sprintf(": it runs from %s, its run_at", showTime(c.RunsAt))
		case c.RunsAt != nil:
			line += fmt.Sprintf(" while it ran: it runs again from %s, once that attempt's lease has ended", showTime(c.RunsAt))
		}
		fmt.Fprintln(g.stdout, line+")")
	}
	return refusedError(res)
}

// printRunning names the cancelled jobs that were running: their workers
// stop them at their next heartbeat.
func printRunning(w io.Writer, past string, res runtime.ChangeResult) {
	if past != "cancelled" {
		return
	}
	for _, c := range res.Changed {
		if c.From == runtime.StateRunning {
			fmt.Fprintf(w, "job %d was running: its worker stops it at its next heartbeat\n", c.ID)
		}
	}
}

// refusedErrorMost is how many refused jobs the error of a change names.
const refusedErrorMost = 20

// refusedError fails a change naming each job it left alone, with the
// reason, one a line, up to refusedErrorMost of them; --json lists every
// one.
func refusedError(res runtime.ChangeResult) error {
	if len(res.Skipped) == 0 {
		return nil
	}
	var lines errorList
	for i, s := range res.Skipped {
		if i == refusedErrorMost {
			lines = append(lines, fmt.Errorf("and %d more jobs left alone (--json lists every one)", len(res.Skipped)-refusedErrorMost))
			break
		}
		lines = append(lines, errors.New(s.Reason))
	}
	return lines
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

// singleLine folds s onto one line of at most n characters, for a table
// cell, with its control characters escaped (termLine).
func singleLine(s string, n int) string {
	return termLine(oneLine(s, n))
}

// writeJSON prints v as indented JSON, with the characters a terminal would
// act on escaped (jsonTerminalSafe).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonTerminalSafe(b.Bytes()))
	return err
}
