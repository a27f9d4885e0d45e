package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/otelfila"
)

func init() {
	register("enqueue", "insert one job and print its id", runEnqueue)
}

// maxAttemptsMax is the fila_jobs_max_attempts_valid constraint's limit.
const maxAttemptsMax = 1000

func runEnqueue(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	kind := fs.String("kind", "", "job kind (required); a worker of the queue must handle it, or be a built-in (noop, sleep)")
	queue := fs.String("queue", "default", "queue")
	payload := fs.String("payload", "{}", "payload as JSON; - reads it from stdin, @FILE from a file (for payloads too long for a command line)")
	runAt := fs.String("run-at", "", "not before this time: RFC 3339 (2026-01-02T15:04:05Z) or +DURATION from now (+90s)")
	priority := fs.Int("priority", 0, "priority, -32768 to 32767: a lower number runs first")
	maxAttempts := fs.Int("max-attempts", 5, fmt.Sprintf("attempts before the job is dead, 1 to %d", maxAttemptsMax))
	allowUnknown := fs.Bool("allow-unknown-kind", false, "enqueue even if no worker of the queue has registered this kind yet")
	uniqueKey := fs.String("unique-key", "", "make the job unique per kind while an equal one is in --unique-states: a duplicate inserts nothing and prints the existing job's id")
	uniqueStates := fs.String("unique-states", "pending,running", "with --unique-key: the states, comma-separated, during which the key holds (pending is required)")
	var tags stringList
	fs.Var(&tags, "tag", "a tag to find the job by (fila jobs list --tag); repeat for more")
	meta := keyValues{}
	fs.Var(meta, "meta", "KEY=VALUE metadata the job carries to its handler and shows; repeat for more")
	held := fs.Bool("held", false, "insert the job held: no worker runs it until `fila jobs release ID`")
	after := fs.String("after", "", "ID[,ID…]: jobs that must complete first; until then the job is waiting")
	onDepFailure := fs.String("on-dependency-failure", "", "with --after: when a dependency ends dead or cancelled, the job ends dead (default), cancel, or run anyway")
	sequence := fs.String("sequence", "", "KEY: run one at a time, in insertion order, with the other jobs of this sequence")
	onDead := fs.String("sequence-on-dead", "", "with --sequence: when the job before is dead, block (default: wait until it is retried or deleted) or continue")
	batch := fs.Int64("batch", 0, "ID of an open batch to join (fila batch new)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := runtime.ValidateKind(*kind); err != nil {
		return fmt.Errorf("--kind: %w", err)
	}
	if err := channel.ValidateQueue(*queue); err != nil {
		return fmt.Errorf("--queue: %w", err)
	}
	if *priority < -32768 || *priority > 32767 {
		return fmt.Errorf("--priority %d out of range: allowed -32768 to 32767", *priority)
	}
	if *maxAttempts < 1 || *maxAttempts > maxAttemptsMax {
		return fmt.Errorf("--max-attempts %d out of range: allowed 1 to %d", *maxAttempts, maxAttemptsMax)
	}
	opts := &runtime.InsertOpts{Queue: *queue, Priority: int16(*priority), MaxAttempts: *maxAttempts, Tags: tags, Held: *held}
	traceFromEnv(g, meta)
	if len(meta) > 0 {
		opts.Metadata = meta.asAny()
	}
	if *uniqueKey != "" {
		opts.UniqueKey = *uniqueKey
		opts.UniqueStates = strings.Split(strings.ReplaceAll(*uniqueStates, " ", ""), ",")
	} else if fsVisited(fs, "unique-states") {
		return g.usageError("--unique-states needs --unique-key")
	}
	if *after != "" {
		for _, f := range strings.Split(*after, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("--after %q: want job ids separated by commas, such as 12,13", *after)
			}
			opts.After = append(opts.After, id)
		}
	}
	switch {
	case *onDepFailure != "" && *after == "":
		return g.usageError("--on-dependency-failure needs --after")
	case *onDead != "" && *sequence == "":
		return g.usageError("--sequence-on-dead needs --sequence")
	case *onDepFailure != "" && !slices.Contains([]string{runtime.DependencyFailureDead, runtime.DependencyFailureCancel, runtime.DependencyFailureRun}, *onDepFailure):
		return fmt.Errorf("--on-dependency-failure %q: use dead, cancel or run", *onDepFailure)
	case *onDead != "" && *onDead != runtime.SequenceDeadBlock && *onDead != runtime.SequenceDeadContinue:
		return fmt.Errorf("--sequence-on-dead %q: use block or continue", *onDead)
	case *batch < 0:
		return fmt.Errorf("--batch %d is not a batch id", *batch)
	}
	opts.OnDependencyFailure, opts.Sequence, opts.SequenceOnDead, opts.Batch = *onDepFailure, *sequence, *onDead, *batch
	if err := runtime.ValidateInsertOpts(opts); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The table's limits are the ones that hold; checked here, a payload
	// over them is refused before it is read whole or sent.
	limits, enforced, err := runtime.TablePayloadLimits(ctx, pool)
	if err != nil {
		return err
	}
	if !enforced {
		limits = runtime.PayloadLimits{MaxBytes: runtime.PayloadMaxBytesMax, MaxDepth: runtime.PayloadMaxDepthMax}
	}
	opts.PayloadLimits = limits
	body, err := readPayload(*payload, g.stdin, limits)
	if err != nil {
		return err
	}
	if *runAt != "" {
		t, err := parseRunAt(ctx, pool, *runAt)
		if err != nil {
			return err
		}
		opts.RunAt = t
	}
	if !*allowUnknown {
		if err := checkKnownKind(ctx, pool, *queue, *kind); err != nil {
			return err
		}
	}
	res, err := runtime.InsertJob(ctx, pool, *kind, body, opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, res.ID)
	if res.Duplicate {
		// stdout stays the id alone, for scripts; what happened goes to stderr.
		fmt.Fprintf(g.stderr, "fila enqueue: duplicate: job %d of kind %s with unique key %q is %s; nothing was inserted\n",
			res.ID, termLine(*kind), *uniqueKey, termLine(res.DuplicateState))
	}
	return nil
}

// readPayloadSlack is how many times the payload limit a file or stdin may
// hold before it is refused unread: room for indentation and blanks, which
// the limit does not count.
const readPayloadSlack = 8

// readPayload reads --payload: JSON itself, "-" for stdin or "@FILE". Neither
// "-" nor "@…" is valid JSON, so the forms cannot be confused. A payload
// over limits (the table's) is refused naming them; a file or stdin far
// larger is refused without reading it whole.
func readPayload(arg string, stdin io.Reader, limits runtime.PayloadLimits) (json.RawMessage, error) {
	var (
		body []byte
		err  error
		what = "--payload"
	)
	most := int64(limits.MaxBytes)*readPayloadSlack + 64<<10
	switch {
	case arg == "-":
		what = "--payload - (stdin)"
		if stdin == nil {
			return nil, fmt.Errorf("%s: no stdin", what)
		}
		body, err = io.ReadAll(io.LimitReader(stdin, most+1))
	case strings.HasPrefix(arg, "@"):
		what = "--payload " + arg
		var f *os.File
		if f, err = os.Open(arg[1:]); err == nil {
			body, err = io.ReadAll(io.LimitReader(f, most+1))
			f.Close()
		}
	default:
		body = []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(body)) > most {
		return nil, fmt.Errorf("%s holds more than %d bytes, far over the table's payload limit of %d bytes (fila jobs limits shows and sets it)",
			what, most, limits.MaxBytes)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, fmt.Errorf("%s is empty: give a JSON value such as {}", what)
	}
	if err := json.Unmarshal(body, new(json.RawMessage)); err != nil {
		if what == "--payload" {
			return nil, fmt.Errorf("--payload is not valid JSON (%v): %q", err, truncateString(arg, 80))
		}
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	if err := limits.Check(body); err != nil {
		return nil, fmt.Errorf("%s %v: the table's limit (fila jobs limits shows and sets it)", what, err)
	}
	return json.RawMessage(body), nil
}

// parseRunAt reads an absolute time, or +DURATION from the database's now().
func parseRunAt(ctx context.Context, pool *pgxpool.Pool, s string) (time.Time, error) {
	if strings.HasPrefix(s, "+") {
		d, err := time.ParseDuration(s[1:])
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("--run-at %q: want +DURATION such as +90s or +2h", s)
		}
		var now time.Time
		if err := pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return time.Time{}, err
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--run-at %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z, or +DURATION", s)
	}
	return t, nil
}

// checkKnownKind refuses a kind no worker of the queue has registered: such
// a job would wait, unnoticed, until someone deploys a handler for it there.
// The built-in kinds are always accepted: every `fila work` runs them, and
// they are what a first try uses.
func checkKnownKind(ctx context.Context, pool *pgxpool.Pool, queue, kind string) error {
	if slices.Contains(builtinKindNames(), kind) {
		return nil
	}
	var known bool
	var all []string
	err := pool.QueryRow(ctx, `SELECT coalesce(bool_or(kind = $2::text), false), coalesce(array_agg(kind ORDER BY kind), '{}')
		FROM fila_kinds WHERE queue = $1::text`, queue, kind).Scan(&known, &all)
	if err != nil {
		return fmt.Errorf("check kind: %w", err)
	}
	if known {
		return nil
	}
	list := "none yet"
	if len(all) > 0 {
		list = strings.Join(all, ", ")
	}
	return fmt.Errorf("no worker handles kind %q on queue %q; workers of %s handle: %s. Start a worker for it (fila work --queue %s --exec %s=COMMAND), or pass --allow-unknown-kind",
		kind, queue, queue, list, queue, kind)
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// fsVisited reports whether the flag named name was given.
func fsVisited(fs *flag.FlagSet, name string) bool {
	seen := false
	fs.Visit(func(f *flag.Flag) { seen = seen || f.Name == name })
	return seen
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// keyValues is a KEY=VALUE flag that may be given several times.
type keyValues map[string]string

func (m keyValues) String() string { return "" }

func (m keyValues) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	m[k] = val
	return nil
}

func (m keyValues) asAny() map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// traceFromEnv puts the trace context of the environment (TRACEPARENT and
// TRACESTATE, as `fila work --otel` gives its --exec commands and as other
// tools give theirs) in the job's metadata, where runtime/otelfila keeps a
// Go insert's: the job's attempts then join that trace. A --meta
// traceparent given on the command line wins; a TRACEPARENT that is not a
// W3C traceparent is left out with a warning, and the job is enqueued.
func traceFromEnv(g *globals, meta keyValues) {
	tp := os.Getenv("TRACEPARENT")
	if tp == "" {
		return
	}
	if _, given := meta[otelfila.MetadataTraceParent]; given {
		return
	}
	carrier := propagation.MapCarrier{otelfila.MetadataTraceParent: tp}
	if ts := os.Getenv("TRACESTATE"); ts != "" {
		carrier[otelfila.MetadataTraceState] = ts
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		g.log().Warn("TRACEPARENT is not a W3C traceparent (version-traceid-spanid-flags); the job is enqueued without a trace context",
			zap.String("traceparent", tp))
		return
	}
	meta[otelfila.MetadataTraceParent] = tp
	if ts := sc.TraceState().String(); ts != "" {
		meta[otelfila.MetadataTraceState] = ts
	}
}
