package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fila-run/fila/internal/channel"
)

// SQL of the insert API. Payloads travel as text and are cast by the server,
// which PgBouncer in transaction mode carries like any other parameter.
const (
	insertSQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, run_at, max_attempts)
VALUES ($1::text, $2::text, $3::text::jsonb, $4::smallint, coalesce($5::timestamptz, now()), $6::int)
RETURNING id`

	// One statement however many jobs: the statement-level trigger then sends
	// one notification per queue, not one per row.
	insertManySQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, run_at, max_attempts)
SELECT q, k, p::jsonb, pr, coalesce(ra, now()), ma
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::timestamptz[], $6::int[])
     AS t(q, k, p, pr, ra, ma)
RETURNING id`
)

// InsertOpts are the optional settings of a new job.
type InsertOpts struct {
	// Queue defaults to "default".
	Queue string
	// Priority: lower runs first. Defaults to 0.
	Priority int16
	// RunAt: not before this time. Defaults to now (the database's clock).
	RunAt time.Time
	// MaxAttempts defaults to 5; allowed 1 to 1000.
	MaxAttempts int
}

// InsertParams is one job of InsertMany.
type InsertParams struct {
	Kind string
	// Payload is marshalled to JSON; []byte and json.RawMessage must already
	// be valid JSON. nil becomes {}.
	Payload any
	InsertOpts
}

type insertRow struct {
	queue, kind, payload string
	priority             int16
	runAt                *time.Time
	maxAttempts          int32
}

func prepare(p InsertParams) (insertRow, error) {
	r := insertRow{queue: p.Queue, kind: p.Kind, priority: p.Priority, maxAttempts: int32(p.MaxAttempts)}
	if r.queue == "" {
		r.queue = "default"
	}
	if err := channel.ValidateQueue(r.queue); err != nil {
		return r, err
	}
	if err := ValidateKind(r.kind); err != nil {
		return r, err
	}
	switch {
	case r.maxAttempts == 0:
		r.maxAttempts = 5
	case r.maxAttempts < 1 || r.maxAttempts > 1000:
		return r, fmt.Errorf("max attempts %d out of range: allowed 1 to 1000", p.MaxAttempts)
	}
	if !p.RunAt.IsZero() {
		t := p.RunAt
		r.runAt = &t
	}
	switch v := p.Payload.(type) {
	case nil:
		r.payload = "{}"
	case json.RawMessage:
		if !json.Valid(v) {
			return r, fmt.Errorf("payload of kind %q is not valid JSON", r.kind)
		}
		r.payload = string(v)
	case []byte:
		if !json.Valid(v) {
			return r, fmt.Errorf("payload of kind %q is not valid JSON", r.kind)
		}
		r.payload = string(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return r, fmt.Errorf("payload of kind %q: %w", r.kind, err)
		}
		r.payload = string(b)
	}
	return r, nil
}

// Insert enqueues one job and returns its id. db may be a pool or a
// transaction: inside a transaction (see InsertTx) the job becomes visible to
// workers only when it commits, and never if it rolls back.
func Insert(ctx context.Context, db DB, kind string, payload any, opts *InsertOpts) (int64, error) {
	p := InsertParams{Kind: kind, Payload: payload}
	if opts != nil {
		p.InsertOpts = *opts
	}
	r, err := prepare(p)
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	var id int64
	if err := db.QueryRow(ctx, insertSQL, r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts).Scan(&id); err != nil {
		return 0, fmt.Errorf("insert job of kind %q: %w", kind, err)
	}
	return id, nil
}

// InsertTx enqueues one job inside the caller's transaction, in the same
// commit as the business data it belongs to.
func InsertTx(ctx context.Context, tx DB, kind string, payload any, opts *InsertOpts) (int64, error) {
	return Insert(ctx, tx, kind, payload, opts)
}

// InsertMany enqueues many jobs in one statement and returns their ids in
// order. Nothing is inserted if any job is invalid.
func InsertMany(ctx context.Context, db DB, jobs []InsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	n := len(jobs)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int16, n), make([]int32, n)
	runAts := make([]*time.Time, n)
	for i, j := range jobs {
		r, err := prepare(j)
		if err != nil {
			return nil, fmt.Errorf("insert many: job %d: %w", i, err)
		}
		queues[i], kinds[i], payloads[i], prios[i], runAts[i], maxes[i] = r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts
	}
	rows, err := db.Query(ctx, insertManySQL, queues, kinds, payloads, prios, runAts, maxes)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("insert %d jobs: %w", n, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	return ids, nil
}
