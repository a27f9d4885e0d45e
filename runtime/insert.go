package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/channel"
)

// SQL of the insert API. Payloads travel as text and are cast by the server,
// which PgBouncer in transaction mode carries like any other parameter.
const (
	insertSQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, run_at, max_attempts, tags, metadata, state, policy)
VALUES ($1::text, $2::text, $3::text::jsonb, $4::smallint, coalesce($5::timestamptz, now()), $6::int,
        $7::text[], $8::text::jsonb, coalesce($9::text, 'pending'), $10::text::jsonb)
RETURNING id`

	// One statement however many jobs: the statement-level trigger then sends
	// one notification per queue, not one per row.
	// Each job's tags travel joined by U+001F, which a tag cannot hold (an
	// array of arrays must be rectangular in PostgreSQL).
	insertManySQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, run_at, max_attempts, tags, metadata, state, policy)
SELECT q, k, p::jsonb, pr, coalesce(ra, now()), ma, string_to_array(tg, E'\x1f'), md::jsonb, coalesce(st, 'pending'), po::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::timestamptz[], $6::int[], $7::text[], $8::text[], $9::text[],
            $10::text[])
     AS t(q, k, p, pr, ra, ma, tg, md, st, po)
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
	// UniqueKey, if set, makes the job unique per kind among the jobs in
	// UniqueStates: inserting a duplicate inserts nothing and returns the
	// existing job's id (InsertJob says it was a duplicate). The database
	// enforces it, across processes and for plain SQL producers too.
	// Defaults to none.
	UniqueKey string
	// UniqueStates are the states during which UniqueKey holds. Defaults to
	// pending and running.
	UniqueStates []string
	// Tags label the job, to find it by (ListJobs, fila jobs list --tag, the
	// dashboard): at most TagsMax of 1 to TagMaxLen characters, without
	// control characters. Defaults to none.
	Tags []string
	// Metadata travels with the job to its handler (Job.Metadata) and is
	// shown with it: small facts about where it comes from, such as the
	// trace context of the transaction that enqueued it. At most
	// MetadataMaxBytes of JSON. Defaults to none.
	Metadata map[string]any
	// Timeout cancels each attempt's handler after this long, in place of
	// its kind's Timeout (Kind.Timeout); not negative. It travels with the
	// job (its row's policy, apart from Metadata), so it holds whichever
	// worker runs the job. Defaults to 0: the kind's.
	Timeout time.Duration
	// Retry is this job's retry backoff, in place of its kind's
	// (Kind.Backoff) and the runtime's (Config.RetryBase, RetryMax); a
	// handler's RetryAfter still wins. It travels with the job, as Timeout
	// does. Defaults to nil: the kind's.
	Retry *RetryPolicy
	// After lists jobs, by id, that must complete before this one runs:
	// until then it is waiting, which no worker claims. They must exist
	// and have lower ids (be inserted before); InsertWorkflow inserts a
	// graph of new jobs at once. At most DependenciesMax. Defaults to none.
	After []int64
	// OnDependencyFailure is what the job does when a dependency ends dead
	// or cancelled: DependencyFailureDead (the default), ...Cancel or
	// ...Run.
	OnDependencyFailure string
	// Sequence, if set, puts the job in the sequence of that key: the
	// jobs of one sequence run one at a time, in the order they were
	// inserted (committed), a retrying one keeping its place. At most
	// SequenceKeyMax bytes. Defaults to none.
	Sequence string
	// SequenceOnDead is what the job does when the one before it in its
	// sequence is dead: SequenceDeadBlock (wait, the default) or
	// SequenceDeadContinue.
	SequenceOnDead string
	// Batch, if set, adds the job to an open batch (NewBatch, InsertBatch).
	// Defaults to none.
	Batch int64
	// Held inserts the job held: no worker claims it until Release lets
	// it go (then it runs at its RunAt, or at once). Its insert wakes no
	// worker; its release does. A held job cannot have a UniqueKey or a
	// flow (After, Sequence, Batch, a workflow). Defaults to false.
	Held bool
	// PayloadLimits are what the payload is checked against before it is
	// sent, with an error wrapping ErrPayloadLimit. The table checks its
	// own limits as the row is written (TablePayloadLimits): raise both to
	// enqueue larger payloads. Each zero field defaults to the table's
	// default, PayloadMaxBytesDefault and PayloadMaxDepthDefault.
	PayloadLimits PayloadLimits
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
	uniqueKey            *string
	uniqueStates         []string
	tags, metadata       *string // tags joined by U+001F; metadata as JSON
	policy               *string // the job's Timeout and Retry as JSON (see encodePolicy)
	held                 bool

	// Flows (see flows.go).
	dependsOn                            []int64
	depFailure, sequence, sequenceOnDead *string
	batch                                *int64
	hasDependents, inWorkflow            bool
	// workflowID and workflowStep are set for the jobs of a workflow
	// (see InsertWorkflow).
	workflowID   *int64
	workflowStep *string
}

// Bounds of InsertOpts.Tags and InsertOpts.Metadata (the table's trigger
// fila_jobs_tags_metadata_valid holds them too).
const (
	TagsMax          = 32
	TagMaxLen        = 100
	MetadataMaxBytes = 16 << 10
)

// prepareTags checks and encodes a job's tags and metadata.
func prepareTags(r *insertRow, o InsertOpts) error {
	if len(o.Tags) > 0 {
		if len(o.Tags) > TagsMax {
			return fmt.Errorf("%d tags: at most %d", len(o.Tags), TagsMax)
		}
		for _, t := range o.Tags {
			n := utf8.RuneCountInString(t)
			if n < 1 || n > TagMaxLen || !utf8.ValidString(t) || strings.ContainsFunc(t, unicode.IsControl) {
				return fmt.Errorf("tag %q: 1 to %d characters, valid UTF-8, no control characters", t, TagMaxLen)
			}
		}
		joined := strings.Join(o.Tags, "\x1f")
		r.tags = &joined
	}
	if o.Metadata != nil {
		b, err := json.Marshal(o.Metadata)
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		if len(b) > MetadataMaxBytes {
			return fmt.Errorf("metadata: %d bytes of JSON, at most %d", len(b), MetadataMaxBytes)
		}
		if err := storableJSON(b); err != nil {
			return fmt.Errorf("metadata %w", err)
		}
		md := string(b)
		r.metadata = &md
	}
	return nil
}

func prepare(p InsertParams) (insertRow, error) { return prepareWith(p, false) }

// prepareWith prepares a job, of a workflow (InsertWorkflow) or not.
func prepareWith(p InsertParams, inWorkflow bool) (insertRow, error) {
	r := insertRow{queue: p.Queue, kind: p.Kind, priority: p.Priority, maxAttempts: int32(p.MaxAttempts), inWorkflow: inWorkflow}
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
	if err := prepareUnique(&r, p.InsertOpts); err != nil {
		return r, err
	}
	if err := prepareTags(&r, p.InsertOpts); err != nil {
		return r, err
	}
	policy, err := encodePolicy(p.InsertOpts)
	if err != nil {
		return r, err
	}
	r.policy = policy
	if err := prepareFlow(&r, p.InsertOpts); err != nil {
		return r, err
	}
	if p.Held {
		switch {
		case r.uniqueKey != nil:
			return r, errors.New("Held: a held job cannot have a UniqueKey (its key would hold nothing while it is held)")
		case r.hasFlow():
			return r, errors.New("Held: a held job cannot have After, Sequence or Batch, or be part of a workflow: its flow decides when it runs")
		}
		r.held = true
	}
	limits := p.PayloadLimits.WithDefaults()
	if err := limits.Validate(); err != nil {
		return r, err
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
	if err := limits.Check(raw); err != nil {
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
// workers only when it commits, and never if it rolls back. A job with a
// UniqueKey that duplicates an existing one is not inserted: Insert returns
// the existing job's id (use InsertJob to know it was a duplicate).
func Insert(ctx context.Context, db DB, kind string, payload any, opts *InsertOpts) (int64, error) {
	res, err := InsertJob(ctx, db, kind, payload, opts)
	return res.ID, err
}

// InsertTx enqueues one job inside the caller's transaction, in the same
// commit as the business data it belongs to.
func InsertTx(ctx context.Context, tx DB, kind string, payload any, opts *InsertOpts) (int64, error) {
	return Insert(ctx, tx, kind, payload, opts)
}

// InsertMany enqueues many jobs in one statement and returns their ids in
// order. Nothing is inserted if any job is invalid. db may be a pool, a
// connection or the caller's transaction. A batch in which some job has a
// UniqueKey is inserted one statement per job, in one transaction; a
// duplicate's id is the existing job's.
//
// A batch of InsertManyCopyMin jobs or more is written with COPY when db
// offers it (pgxpool.Pool, pgx.Conn and pgx.Tx do): its ids are taken from
// the table's sequence first, in order, then the rows stream in one COPY
// statement. The insert trigger treats a COPY like any INSERT: one
// notification per queue for the whole batch. database/sql has no COPY: a
// batch through SQL is one statement whatever its size.
func InsertMany(ctx context.Context, db DB, jobs []InsertParams) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	rows := make([]insertRow, len(jobs))
	unique, flows, held := false, false, -1
	for i, j := range jobs {
		r, err := prepare(j)
		if err != nil {
			return nil, fmt.Errorf("insert many: job %d: %w", i, err)
		}
		rows[i] = r
		unique = unique || r.uniqueKey != nil
		flows = flows || r.hasFlow()
		if r.held && held < 0 {
			held = i
		}
	}
	if flows && held >= 0 {
		return nil, fmt.Errorf("insert many: job %d: Held: a held job cannot be inserted in one batch with jobs that have flows", held)
	}
	var (
		ids []int64
		err error
	)
	c, canCopy := db.(copier)
	switch {
	case flows:
		// Jobs with flows, and those around them, in one statement of
		// their own: the plain paths keep their columns.
		ids, err = insertFlowRows(ctx, db, rows, nil)
	case unique:
		ids, err = insertEach(ctx, db, rows)
	case canCopy && len(rows) >= InsertManyCopyMin:
		ids, err = insertCopy(ctx, db, c, rows)
	default:
		ids, err = insertStatement(ctx, db, rows)
	}
	return ids, payloadLimitError(err)
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
	tags, metadata, states, policies := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	for i, r := range rows {
		queues[i], kinds[i], payloads[i], prios[i], runAts[i], maxes[i] = r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts
		tags[i], metadata[i], states[i], policies[i] = r.tags, r.metadata, r.state(), r.policy
	}
	res, err := db.Query(ctx, insertManySQL, queues, kinds, payloads, prios, runAts, maxes, tags, metadata, states, policies)
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
	// Tags and metadata travel only when some job has them.
	var labelled bool
	for _, r := range rows {
		labelled = labelled || r.tags != nil || r.metadata != nil
	}
	// The state travels only when some job is held, the policy only when
	// some job has one.
	var held, policies bool
	for _, r := range rows {
		held = held || r.held
		policies = policies || r.policy != nil
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
	if labelled {
		columns = append(columns, "tags", "metadata")
	}
	if held {
		columns = append(columns, "state")
	}
	if policies {
		columns = append(columns, "policy")
	}
	values := make([]any, len(columns))
	src := pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		r := rows[i]
		values[0], values[1], values[2], values[3], values[4], values[5] = ids[i], r.queue, r.kind, r.payload, r.priority, r.maxAttempts
		next := 6
		if scheduled > 0 {
			if r.runAt != nil {
				values[next] = *r.runAt
			} else {
				values[next] = now
			}
			next++
		}
		if labelled {
			values[next], values[next+1] = nil, nil
			if r.tags != nil {
				values[next] = strings.Split(*r.tags, "\x1f")
			}
			if r.metadata != nil {
				values[next+1] = json.RawMessage(*r.metadata)
			}
			next += 2
		}
		if held {
			values[next] = StatePending
			if r.held {
				values[next] = StateHeld
			}
			next++
		}
		if policies {
			values[next] = nil
			if r.policy != nil {
				values[next] = json.RawMessage(*r.policy)
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

// state is the row's state parameter: nil for the column's default
// (pending), or held.
func (r insertRow) state() *string {
	if !r.held {
		return nil
	}
	s := StateHeld
	return &s
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
