package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/runtime"
)

func init() {
	register("enqueue", "insert one job and print its id", runEnqueue)
}

func runEnqueue(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	kind := fs.String("kind", "", "job kind (required); a worker must handle it")
	queue := fs.String("queue", "default", "queue")
	payload := fs.String("payload", "{}", "payload, as JSON")
	runAt := fs.String("run-at", "", "not before this time: RFC 3339 (2026-01-02T15:04:05Z) or +DURATION from now (+90s)")
	priority := fs.Int("priority", 0, "priority; lower runs first (-32768 to 32767)")
	maxAttempts := fs.Int("max-attempts", 5, "attempts before the job is dead (1 to 1000)")
	allowUnknown := fs.Bool("allow-unknown-kind", false, "enqueue even if no worker has registered this kind yet")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *kind == "" {
		return errors.New("--kind is required")
	}
	if !json.Valid([]byte(*payload)) {
		return fmt.Errorf("--payload is not valid JSON: %q", truncateString(*payload, 80))
	}
	if *priority < -32768 || *priority > 32767 {
		return fmt.Errorf("--priority %d out of range: allowed -32768 to 32767", *priority)
	}
	opts := &runtime.InsertOpts{Queue: *queue, Priority: int16(*priority), MaxAttempts: *maxAttempts}
	pool, err := g.pool(ctx)
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
		if err := checkKnownKind(ctx, pool, *kind); err != nil {
			return err
		}
	}
	id, err := runtime.Insert(ctx, pool, *kind, json.RawMessage(*payload), opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, id)
	return nil
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

// checkKnownKind refuses a kind no worker has ever registered against this
// database: such a job would wait, unnoticed, until someone deploys a handler.
func checkKnownKind(ctx context.Context, pool *pgxpool.Pool, kind string) error {
	var known bool
	var all []string
	err := pool.QueryRow(ctx, `SELECT coalesce(bool_or(kind = $1::text), false), coalesce(array_agg(kind ORDER BY kind), '{}')
		FROM fila_kinds`, kind).Scan(&known, &all)
	if err != nil {
		return fmt.Errorf("check kind: %w (has `fila migrate` run?)", err)
	}
	if known {
		return nil
	}
	list := "none yet"
	if len(all) > 0 {
		list = strings.Join(all, ", ")
	}
	return fmt.Errorf("no worker handles kind %q (kinds workers have registered: %s); start a worker for it, or pass --allow-unknown-kind", kind, list)
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
