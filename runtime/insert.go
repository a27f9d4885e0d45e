package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

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

	// Ids for a COPY, taken from the identity column's own sequence. COPY
	// writes the id column as given, like INSERT … OVERRIDING SYSTEM VALUE.
	// The sequence is looked up once, in the subquery: a text-to-regclass
	// cast on every row would cost four times the nextval calls themselves.
	reserveIDsSQL = `SELECT nextval((SELECT pg_get_serial_sequence('fila_jobs', 'id')::regclass))
FROM generate_series(1, $1::int)`

	// The database clock, for the jobs of a mixed COPY that set no RunAt.
	nowSQL = `SELECT now()`
)

// InsertManyCopyMin is the smallest InsertMany batch written with COPY
// rather than one INSERT … SELECT FROM unnest(…) statement. COPY costs two
// more round trips (the ids, then the table's description) and then takes
// rows faster; measured, the two are even near this size, and the single
// statement wins below it (BenchmarkInsertManyPaths).
const InsertManyCopyMin = 2000

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
	var raw []byte
	switch v := p.Payload.(type) {
	case nil:
		r.payload = "{}"
		return r, nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return r, fmt.Errorf("payload of kind %q: %w", r.kind, err)
		}
		raw = b
	}
	if err := storableJSON(raw); err != nil {
		return r, fmt.Errorf("payload of kind %q %w", r.kind, err)
	}
	r.payload = string(raw)
	return r, nil
}

// storableJSON refuses what jsonb cannot hold, so that one bad payload is
// named here instead of failing a whole batch on the server with no job to
// point at. Go's JSON accepts invalid UTF-8 and the \u0000 escape (json.Marshal
// writes it for a NUL in a string); jsonb takes neither.
func storableJSON(b []byte) error {
	if !json.Valid(b) {
		return errors.New("is not valid JSON")
	}
	if !utf8.Valid(b) {
		return errors.New("is not valid UTF-8")
	}
	// In valid JSON a backslash appears only inside a string and always
	// escapes the character after it.
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i+1 < len(b); {
		if b[i+1] == 'u' && bytes.HasPrefix(b[i+2:], []byte("0000")) {
			return errors.New(`holds the escape \u0000, which PostgreSQL's jsonb cannot store`)
		}
		next := bytes.IndexByte(b[i+2:], '\\')
		if next < 0 {
			break
		}
		i += 2 + next
	}
	return nil
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
// order. Nothing is inserted if any job is invalid. db may be a pool, a
// connection or the caller's transaction.
//
// A batch of InsertManyCopyMin jobs or more is written with COPY when db
// offers it (pgxpool.Pool, pgx.Conn and pgx.Tx do): its ids are taken from
// the table's sequence first, in order, then the rows stream in one COPY
// statement. The insert trigger treats a COPY like any INSERT: one
// notification per queue for the whole batch.
func InsertMany(ctx context.Context, db DB, jobs []InsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	rows := make([]insertRow, len(jobs))
	for i, j := range jobs {
		r, err := prepare(j)
		if err != nil {
			return nil, fmt.Errorf("insert many: job %d: %w", i, err)
		}
		rows[i] = r
	}
	if c, ok := db.(copier); ok && len(rows) >= InsertManyCopyMin {
		return insertCopy(ctx, db, c, rows)
	}
	return insertStatement(ctx, db, rows)
}

// copier is the part of pgxpool.Pool, pgx.Conn and pgx.Tx that writes COPY.
type copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

func insertStatement(ctx context.Context, db DB, rows []insertRow) ([]int64, error) {
	n := len(rows)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int16, n), make([]int32, n)
	runAts := make([]*time.Time, n)
	for i, r := range rows {
		queues[i], kinds[i], payloads[i], prios[i], runAts[i], maxes[i] = r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts
	}
	res, err := db.Query(ctx, insertManySQL, queues, kinds, payloads, prios, runAts, maxes)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	ids, err := scanIDs(res, n)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: %w", n, err)
	}
	return ids, nil
}

func insertCopy(ctx context.Context, db DB, c copier, rows []insertRow) ([]int64, error) {
	n := len(rows)
	res, err := db.Query(ctx, reserveIDsSQL, n)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: reserve ids: %w", n, err)
	}
	ids, err := scanIDs(res, n)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: reserve ids: %w", n, err)
	}
	// One session's nextval calls increase; sorting makes the order of the
	// ids the order of the jobs whatever order the rows came back in.
	slices.Sort(ids)

	columns := []string{"id", "queue", "kind", "payload", "priority", "max_attempts"}
	// Jobs without RunAt get the column's default, now(), exactly as in the
	// single statement. Only when some jobs set it does run_at travel, and
	// then the others carry the database's now().
	var scheduled int
	for _, r := range rows {
		if r.runAt != nil {
			scheduled++
		}
	}
	var now time.Time
	if scheduled > 0 {
		columns = append(columns, "run_at")
		if scheduled < n {
			if err := db.QueryRow(ctx, nowSQL).Scan(&now); err != nil {
				return nil, fmt.Errorf("insert %d jobs: read the database clock: %w", n, err)
			}
		}
	}
	values := make([]any, len(columns))
	src := pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		r := rows[i]
		values[0], values[1], values[2], values[3], values[4], values[5] = ids[i], r.queue, r.kind, r.payload, r.priority, r.maxAttempts
		if scheduled > 0 {
			if r.runAt != nil {
				values[6] = *r.runAt
			} else {
				values[6] = now
			}
		}
		return values, nil
	})
	copied, err := c.CopyFrom(ctx, pgx.Identifier{"fila_jobs"}, columns, src)
	if err != nil {
		return nil, fmt.Errorf("insert %d jobs: copy: %w", n, err)
	}
	if copied != int64(n) {
		return nil, fmt.Errorf("insert %d jobs: copy wrote %d rows", n, copied)
	}
	return ids, nil
}

// scanIDs reads a column of ids and closes rows.
func scanIDs(rows pgx.Rows, n int) ([]int64, error) {
	defer rows.Close()
	ids := make([]int64, 0, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("got %d ids for %d jobs", len(ids), n)
	}
	return ids, nil
}
