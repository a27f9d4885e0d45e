package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
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
	body, err := readPayload(*payload, g.stdin)
	if err != nil {
		return err
	}
	opts := &runtime.InsertOpts{Queue: *queue, Priority: int16(*priority), MaxAttempts: *maxAttempts}
	if *uniqueKey != "" {
		opts.UniqueKey = *uniqueKey
		opts.UniqueStates = strings.Split(strings.ReplaceAll(*uniqueStates, " ", ""), ",")
	} else if fsVisited(fs, "unique-states") {
		return g.usageError("--unique-states needs --unique-key")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
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
			res.ID, *kind, *uniqueKey, res.DuplicateState)
	}
	return nil
}

// readPayload reads --payload: JSON itself, "-" for stdin or "@FILE". Neither
// "-" nor "@…" is valid JSON, so the forms cannot be confused.
func readPayload(arg string, stdin io.Reader) (json.RawMessage, error) {
	var (
		body []byte
		err  error
		what = "--payload"
	)
	switch {
	case arg == "-":
		what = "--payload - (stdin)"
		if stdin == nil {
			return nil, fmt.Errorf("%s: no stdin", what)
		}
		body, err = io.ReadAll(stdin)
	case strings.HasPrefix(arg, "@"):
		what = "--payload " + arg
		body, err = os.ReadFile(arg[1:])
	default:
		body = []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
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
