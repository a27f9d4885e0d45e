package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fila-run/fila/internal/channel"
)

// Job management: list, show, retry, cancel and delete jobs, from a pool or
// inside the caller's transaction. These functions only write rows; workers
// notice by themselves. A row that becomes pending wakes the workers of its
// queue through the table's update trigger, and a running attempt whose row
// was cancelled is stopped by its worker's next heartbeat. Each function
// takes a DB: a pool, or the caller's transaction, with which its change
// commits or rolls back.

// Limits of JobFilter.Limit for ListJobs.
const (
	ListLimitDefault = 100
	ListLimitMax     = 10000
)

// ErrJobNotFound is wrapped by GetJob's error when no job has the id.
var ErrJobNotFound = errors.New("no such job")

// jobStates are the values of fila_jobs.state, in a job's life order.
var jobStates = []string{StateHeld, StateWaiting, StatePending, StateRunning, StateCompleted, StateDead, StateCancelled}

// JobStates returns the states a job can be in: held (inserted held, until
// Release; see InsertOpts.Held), waiting (for its
// dependencies or its sequence predecessor; see InsertOpts.After and
// InsertOpts.Sequence), pending, running, completed, dead and cancelled.
func JobStates() []string { return append([]string(nil), jobStates...) }

// jobViews are the parts of the pending state a listing may select by
// name, with their condition; %[1]s is where a table alias goes (see
// ListStates).
var jobViews = []struct{ name, cond string }{
	{StateScheduled, "%[1]sstate = 'pending' AND %[1]srun_at > now()"},
	{StateRetrying, "%[1]sstate = 'pending' AND %[1]sattempts > 0"},
}

// ListStates returns what JobFilter.State may select: the JobStates, then
// two parts of pending: scheduled (due later: scheduled ahead, or waiting
// out a retry backoff) and retrying (pending again after at least one
// failed attempt, due or not). A retry waiting out its backoff is in both.
func ListStates() []string {
	out := JobStates()
	for _, v := range jobViews {
		out = append(out, v.name)
	}
	return out
}

// JobFilter selects jobs for ListJobs, RetryWhere, CancelWhere and
// DeleteWhere. Empty fields select everything.
type JobFilter struct {
	// State is one of ListStates. ListJobs defaults to any state;
	// RetryWhere to "dead", and accepts only "dead" or "cancelled";
	// CancelWhere and DeleteWhere require one (see each).
	State string
	// Kind selects one job kind.
	Kind string
	// Queue selects one queue.
	Queue string
	// BeforeID selects jobs whose id is below it: the next page of a
	// newest-first listing starts before its last id.
	BeforeID int64
	// Tag selects the jobs with this tag (an index on tags serves it).
	Tag string
	// Metadata selects the jobs whose metadata holds every key and value
	// of it (JSON containment; an index on metadata serves it).
	Metadata map[string]any
	// Limit caps the jobs ListJobs returns (defaults to ListLimitDefault;
	// allowed 1 to ListLimitMax) and the jobs RetryWhere, CancelWhere and
	// DeleteWhere change, oldest first (defaults to every match).
	Limit int

	// The fields below are read by ListJobs and ListJobsPage only; the
	// Where functions refuse them (they select by State, Kind and Queue).

	// States, Kinds and Queues select jobs in any of several states (each
	// one of ListStates), kinds and queues. Each is combined with its
	// single form above: State "dead" with States ["cancelled"] selects
	// both.
	States []string
	Kinds  []string
	Queues []string
	// TagsAny selects the jobs with at least one of these tags; TagsAll
	// (and Tag, which joins it) the jobs with every one of them.
	TagsAny []string
	TagsAll []string
	// Payload selects the jobs whose payload contains this JSON (jsonb
	// containment, payload @> Payload): `{"user": 7}` matches every
	// payload whose user is 7, whatever else it holds. Invalid JSON is an
	// error.
	Payload string
	// OrderBy is what the listing is sorted by: OrderID (the default),
	// OrderRunAt, OrderCreatedAt or OrderPriority, each with the id after
	// it so that the order is total. Ascending sorts from the lowest
	// first; the default is the highest first (the newest, for ids).
	OrderBy   string
	Ascending bool
	// Cursor continues a listing after the page that ListJobsPage
	// returned it with: the same filter, ordering and Limit, with Cursor
	// set to JobPage.Next. It is the position of that page's last job, so
	// jobs inserted or changed meanwhile shift no page: every job that was
	// there before is listed once. A cursor of another ordering is an
	// error; BeforeID and Cursor are not given together.
	Cursor string
	// WorkflowID selects the jobs of one workflow (JobRow.WorkflowID; an
	// index serves it). CancelWorkflow and RetryWorkflow change a workflow
	// as a unit.
	WorkflowID int64
}

// JobRow is one row of fila_jobs, as an operator reads it.
type JobRow struct {
	ID          int64     `json:"id"`
	Queue       string    `json:"queue"`
	Kind        string    `json:"kind"`
	State       string    `json:"state"`
	Priority    int16     `json:"priority"`
	RunAt       time.Time `json:"run_at"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
	// LeaseUntil is when the running attempt's lease ends; nil in every
	// other state (the table keeps a cancelled attempt's lease, which is
	// no one's any more).
	LeaseUntil *time.Time `json:"lease_until"`
	// LastError is the latest failed attempt's error, "" when none failed.
	// ListJobs and PreviewJob read at most its first ErrorTextMax
	// characters (the runtime writes no longer one).
	LastError  string     `json:"last_error"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Worker is the id (in fila_workers) of the worker that claimed the
	// job's last attempt: the one running it while it is running; "" when
	// none has.
	Worker string `json:"worker,omitempty"`
	// Now is the database's clock when the row was read: a running job
	// has been running for Now - StartedAt.
	Now time.Time `json:"-"`
	// Tags are the job's tags (InsertOpts.Tags).
	Tags []string `json:"tags,omitempty"`
	// WorkflowID is the id of the workflow the job belongs to
	// (InsertWorkflowID), nil for a job of none; WorkflowStep is its step's
	// name in it.
	WorkflowID   *int64 `json:"workflow_id,omitempty"`
	WorkflowStep string `json:"workflow_step,omitempty"`
	// Metadata (InsertOpts.Metadata) and Output (Job.SetOutput) are read
	// by GetJob and PreviewJob only; both are bounded (16 KiB and 64 KiB of
	// JSON).
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Output   json.RawMessage `json:"output,omitempty"`
	// Policy is the job's own timeout and retries (InsertOpts.Timeout and
	// Retry) as the worker reads them, read by GetJob and PreviewJob only:
	// {"timeout_ms": N, "retry_base_ms": N, "retry_max_ms": N}, each key
	// present when set; nil when the job has none (its kind's apply).
	Policy json.RawMessage `json:"policy,omitempty"`
	// Payload and Errors are read by GetJob only: a listing of many jobs
	// would carry every payload and error history with it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Errors is the error of each failed attempt, oldest first; the table
	// keeps the latest 20.
	Errors []AttemptError `json:"errors,omitempty"`
}

// AttemptError is one failed attempt in a job's error history.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// UnmarshalJSON reads an element of fila_jobs.errors. The table is a public
// interface, and a hand-written element may spell its time the way
// PostgreSQL prints timestamptz rather than as RFC 3339: such a time is
// still read, and one that cannot be read is left zero rather than hiding
// the error beside it.
func (e *AttemptError) UnmarshalJSON(b []byte) error {
	var raw struct {
		Attempt int    `json:"attempt"`
		At      string `json:"at"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	e.Attempt, e.Error = raw.Attempt, raw.Error
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07"} {
		if t, err := time.Parse(layout, raw.At); err == nil {
			e.At = t
			break
		}
	}
	return nil
}

// ChangeResult is what Retry, RetryWhere, Cancel and Delete did: the jobs
// they changed, and the ones they left alone with the reason.
type ChangeResult struct {
	Changed []JobChange `json:"changed"`
	Skipped []JobSkip   `json:"skipped"`
}

// JobChange is one job that was changed, with the state it was in before.
type JobChange struct {
	ID   int64  `json:"id"`
	From string `json:"from"`
	// RunsAt is set when a retried job is due later than now (it was
	// cancelled while it ran, and runs again once that attempt's lease has
	// ended), or a released one whose RunAt is ahead.
	RunsAt *time.Time `json:"runs_at,omitempty"`
	// To is the state the job was changed to, set by CancelWorkflow and
	// RetryWorkflow (a retried step is pending or waiting).
	To string `json:"to,omitempty"`
}

// JobSkip is one job that was left alone.
type JobSkip struct {
	ID int64 `json:"id"`
	// State is the job's state, "" when no job has the id.
	State string `json:"state,omitempty"`
	// Reason says why, in a sentence that names the job.
	Reason string `json:"reason"`
	// UniqueKey and HeldBy are set when a retry was refused because the
	// job's unique key is held by another job (HeldBy, in HeldByState):
	// two jobs of one kind and key cannot both be in their unique states.
	UniqueKey   string `json:"unique_key,omitempty"`
	HeldBy      int64  `json:"held_by,omitempty"`
	HeldByState string `json:"held_by_state,omitempty"`
}

// IDs returns the ids of the changed jobs, in ascending order.
func (r ChangeResult) IDs() []int64 {
	ids := make([]int64, len(r.Changed))
	for i, c := range r.Changed {
		ids[i] = c.ID
	}
	return ids
}

// Err returns nil when no job was skipped, else one error whose text lists
// every reason: for callers to whom a job left alone is a failure.
func (r ChangeResult) Err() error {
	if len(r.Skipped) == 0 {
		return nil
	}
	reasons := make([]string, len(r.Skipped))
	for i, s := range r.Skipped {
		reasons[i] = s.Reason
	}
	return errors.New(strings.Join(reasons, "; "))
}

// SQL of job management. Each change is one statement: the rows it
// changes are decided under their row locks, so a concurrent claim or
// outcome either happens first (and the change sees its result) or waits.
// The report of skipped jobs reads the statement's snapshot, from before
// the change.
const (
	manageColumns = `id, queue, kind, state, priority, run_at, attempts, max_attempts,
       CASE WHEN state = 'running' THEN lease_until END,
       coalesce(last_error, ''), created_at, started_at, finished_at, coalesce(worker, ''), now(), tags,
       workflow_id, coalesce(workflow_step, '')`

	// boundedColumns are manageColumns with last_error cut to
	// ErrorTextMax characters: the runtime cuts every error it writes to
	// 4 000 bytes, so only one written by hand is ever cut, and a listing
	// of many rows stays bounded however long those are.
	boundedColumns = `id, queue, kind, state, priority, run_at, attempts, max_attempts,
       CASE WHEN state = 'running' THEN lease_until END,
       left(coalesce(last_error, ''), 4000), created_at, started_at, finished_at, coalesce(worker, ''), now(), tags,
       workflow_id, coalesce(workflow_step, '')`

	getJobSQL = `SELECT ` + manageColumns + `, payload::text, errors::text, metadata::text, output::text,
       fila_job_policy(policy, metadata)::text
FROM fila_jobs
WHERE id = $1::bigint`

	// The payload's text is made once (OFFSET 0 keeps the subquery from
	// being folded into the outer query, which would print it once per
	// use); $2 bytes of it are sent. The error history is the latest
	// ErrorsShownMax elements, each an object whose error is cut to 4 000
	// characters; an element written by hand that is not an object is
	// shown as the error text of one.
	previewJobSQL = `SELECT ` + boundedColumns + `,
       substring(p.b FOR $2::int), octet_length(p.b),
       (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(e) = 'object'
                   THEN jsonb_build_object('attempt', e->'attempt', 'at', e->'at', 'error', left(e->>'error', 4000))
                   ELSE jsonb_build_object('error', left(e::text, 4000)) END ORDER BY n), '[]')::text
        FROM (SELECT e, n FROM jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]' END)
                  WITH ORDINALITY AS x(e, n)
              ORDER BY n DESC LIMIT 20) latest),
       CASE WHEN jsonb_typeof(j.errors) = 'array' THEN jsonb_array_length(j.errors) ELSE 0 END,
       j.metadata::text, j.output::text, fila_job_policy(j.policy, j.metadata)::text
FROM fila_jobs j
CROSS JOIN LATERAL (SELECT convert_to(j.payload::text, 'UTF8') AS b OFFSET 0) p
WHERE j.id = $1::bigint`

	// The payload's text in chunks of $2 bytes, each a row, with its whole
	// size and its offset: a reader holds one chunk at a time. The rows
	// come in generate_series's order; an ORDER BY would have the server
	// sort them, every chunk held at once, and WriteJobPayload checks the
	// offsets instead.
	payloadChunksSQL = `SELECT octet_length(p.b), i, substring(p.b FROM i FOR $2::int)
FROM fila_jobs j
CROSS JOIN LATERAL (SELECT convert_to(j.payload::text, 'UTF8') AS b OFFSET 0) p
CROSS JOIN LATERAL generate_series(1, greatest(octet_length(p.b), 1), $2::int) AS i
WHERE j.id = $1::bigint`

	// Retry keeps last_error and errors: the history of what went wrong
	// stays readable after the job runs again. Its update to pending wakes
	// the queue's workers through the table's update trigger.
	//
	// A job cancelled while it ran still has the lease of its cancelled
	// attempt (see cancelSQL): until the lease ends, the worker may not have
	// stopped that attempt yet, so the retried job is due only then. Every
	// other job is due now. A finished job (dead, cancelled, completed)
	// starts its attempts again from 0; a pending job due later is only
	// made due now, its attempts kept: it has not finished.
	retrySet = `state = 'pending',
        run_at = CASE WHEN j.state = 'pending' THEN now() ELSE greatest(now(), j.lease_until) END,
        attempts = CASE WHEN j.state = 'pending' THEN j.attempts ELSE 0 END,
        lease_until = NULL, finished_at = NULL`

	// retryable is which rows a retry moves, on alias j: every finished
	// job, and a pending one due later. A running job is its worker's; a
	// waiting one waits for its flow, and one due now is already due.
	retryable = `(j.state IN ('dead', 'cancelled', 'completed') OR (j.state = 'pending' AND j.run_at > now()))`

	// A retry skips every job whose unique key another job holds: put back
	// to pending, it would break fila_jobs_unique_idx, and the whole
	// statement with it. A job's key is held when another job of its kind
	// with that key is in its own unique states (the index's predicate,
	// spelled as the index spells it, so that the lookup reads the index)
	// and the retried job would enter the index as pending. Of several
	// picked jobs that share a free key, the oldest moves and the others
	// are skipped behind it. Each retry statement is a picked CTE of the
	// jobs it may move (pickedColumns, locked), then retryCTEs, then its
	// report.
	//
	// A completed job of a sequence or a batch is not retried (flow says
	// which): the job after it in its sequence was let go when it
	// completed, and may be running, so running it again would break the
	// sequence's one at a time; a batch counted it, and may have enqueued
	// its callback. A pending job keeps its place in the unique index, and
	// so needs no key of its own looked up.
	pickedColumns = `j.id, j.kind, j.unique_key, j.state AS from_state,
           j.unique_key IS NOT NULL AND j.state <> 'pending'
               AND 'pending' = ANY (coalesce(j.unique_states, '{pending,running}'::text[])) AS keyed,
           CASE WHEN j.state = 'completed' AND j.sequence_key IS NOT NULL THEN 'sequence ' || j.sequence_key
                WHEN j.state = 'completed' AND j.batch_id IS NOT NULL THEN 'batch ' || j.batch_id END AS flow`

	retryCTEs = `, held AS (
    SELECT p.id, h.id AS holder, h.state AS holder_state
    FROM picked p
    CROSS JOIN LATERAL (
        SELECT h.id, h.state FROM fila_jobs h
        WHERE h.kind = p.kind AND h.unique_key = p.unique_key
          AND h.state = ANY (coalesce(h.unique_states, '{pending,running}'::text[]))
          AND h.id <> p.id
        LIMIT 1) h
    WHERE p.keyed
), free AS (
    SELECT p.id, p.kind, p.unique_key FROM picked p
    WHERE p.keyed AND p.id NOT IN (SELECT id FROM held)
), twins AS (
    SELECT f.id, d.first AS holder
    FROM (SELECT kind, unique_key, min(id) AS first FROM free
          GROUP BY kind, unique_key HAVING count(*) > 1) d
    JOIN free f ON f.kind = d.kind AND f.unique_key = d.unique_key AND f.id <> d.first
), blocked AS (
    SELECT id, holder, holder_state FROM held
    UNION ALL
    SELECT id, holder, 'pending' FROM twins
), changed AS (
    UPDATE fila_jobs j
    SET ` + retrySet + `
    FROM picked p
    WHERE j.id = p.id AND ` + retryable + ` AND p.flow IS NULL
      AND p.id NOT IN (SELECT id FROM blocked)
    RETURNING j.id, j.run_at
)`

	// Rows: (id, state before, changed, due later at, unique key, holder,
	// holder's state), as changeJobs reads them.
	retrySQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), picked AS (
    SELECT ` + pickedColumns + `
    FROM fila_jobs j
    WHERE j.id IN (SELECT id FROM want) AND ` + retryable + `
    FOR UPDATE
)` + retryCTEs + `
SELECT w.id, coalesce(p.from_state, j.state), c.id IS NOT NULL, CASE WHEN c.run_at > now() THEN c.run_at END,
       j.unique_key, b.holder, b.holder_state, p.flow
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN picked p ON p.id = w.id
LEFT JOIN changed c ON c.id = w.id
LEFT JOIN blocked b ON b.id = w.id
ORDER BY w.id`

	// %s is the state condition; one of RetryStates. Rows: (id, state
	// before, changed, due later at, unique key, holder, holder's state,
	// flow) of every picked job, as retryRows reads them.
	retryWhereSQL = `WITH picked AS (
    SELECT ` + pickedColumns + `
    FROM fila_jobs j
    WHERE %s AND ` + retryable + `
      AND ($1::text IS NULL OR j.kind = $1::text)
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::bigint IS NULL OR j.id < $3::bigint)
    ORDER BY j.id
    LIMIT $4::bigint
    FOR UPDATE
)` + retryCTEs + `
SELECT p.id, p.from_state, c.id IS NOT NULL, CASE WHEN c.run_at > now() THEN c.run_at END,
       p.unique_key, b.holder, b.holder_state, p.flow
FROM picked p
LEFT JOIN changed c ON c.id = p.id
LEFT JOIN blocked b ON b.id = p.id
ORDER BY p.id`

	// A cancelled running attempt is stopped by its worker, whose next
	// heartbeat finds the row cancelled; its outcome, fenced on the running
	// state, can no longer be written. The row keeps that attempt's
	// lease_until: the worker renews its leases several times per lease,
	// so by then it has seen the cancellation (or, unable to renew, stopped
	// the handler itself), and a retry does not run the job before.
	cancelSQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), changed AS (
    UPDATE fila_jobs j
    SET state = 'cancelled', finished_at = now(),
        lease_until = CASE WHEN j.state = 'running' THEN j.lease_until END
    WHERE j.id IN (SELECT id FROM want) AND j.state IN ('held', 'waiting', 'pending', 'running')
    RETURNING j.id
)
SELECT w.id, j.state, c.id IS NOT NULL, NULL::timestamptz, NULL::text, NULL::bigint, NULL::text
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`

	// %s is the state condition of the jobs to cancel, pending or
	// running. Rows: (id, state before, changed) of every picked job, as
	// changeWhere reads them.
	cancelWhereSQL = `WITH picked AS (
    SELECT j.id, j.state
    FROM fila_jobs j
    WHERE %s
      AND ($1::text IS NULL OR j.kind = $1::text)
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::bigint IS NULL OR j.id < $3::bigint)
    ORDER BY j.id
    LIMIT $4::bigint
    FOR UPDATE
), changed AS (
    UPDATE fila_jobs j
    SET state = 'cancelled', finished_at = now(),
        lease_until = CASE WHEN j.state = 'running' THEN j.lease_until END
    FROM picked p
    WHERE j.id = p.id AND j.state IN ('held', 'waiting', 'pending', 'running')
    RETURNING j.id
)
SELECT p.id, p.state, c.id IS NOT NULL
FROM picked p
LEFT JOIN changed c ON c.id = p.id
ORDER BY p.id`

	// As cancelWhereSQL, for the jobs to delete: any state but running.
	deleteWhereSQL = `WITH picked AS (
    SELECT j.id, j.state
    FROM fila_jobs j
    WHERE %s
      AND ($1::text IS NULL OR j.kind = $1::text)
      AND ($2::text IS NULL OR j.queue = $2::text)
      AND ($3::bigint IS NULL OR j.id < $3::bigint)
    ORDER BY j.id
    LIMIT $4::bigint
    FOR UPDATE
), changed AS (
    DELETE FROM fila_jobs j
    USING picked p
    WHERE j.id = p.id AND j.state <> 'running'
    RETURNING j.id
)
SELECT p.id, p.state, c.id IS NOT NULL
FROM picked p
LEFT JOIN changed c ON c.id = p.id
ORDER BY p.id`

	deleteSQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), changed AS (
    DELETE FROM fila_jobs j
    WHERE j.id IN (SELECT id FROM want) AND j.state <> 'running'
    RETURNING j.id
)
SELECT w.id, j.state, c.id IS NOT NULL, NULL::timestamptz, NULL::text, NULL::bigint, NULL::text
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`
)

// stateCondition is the WHERE condition selecting one state or view of
// ListStates, "" for any, on the table's columns (alias "") or those of
// alias. The state is written into the statement as a constant, never
// passed as a parameter: a partial index is used only when the planner can
// prove its WHERE state = '…' from the query, which a generic plan of a
// parameter would not let it do. state must be one of ListStates.
func stateCondition(state, alias string) string {
	if state == "" {
		return "true"
	}
	cond := "%[1]sstate = '" + state + "'"
	for _, v := range jobViews {
		if v.name == state {
			cond = v.cond
		}
	}
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf(cond, alias)
}

func checkJobState(state string) error {
	if slices.Contains(ListStates(), state) {
		return nil
	}
	return fmt.Errorf("state %q is unknown: use %s", state, strings.Join(ListStates(), ", "))
}

// filterArgs are the parameters $1 to $3 of a filtered statement; NULL
// selects everything.
func filterArgs(f JobFilter) (kind, queue *string, beforeID *int64, err error) {
	if name := listOnly(f); name != "" {
		return nil, nil, nil, fmt.Errorf("JobFilter.%s is read by ListJobs only: select the jobs to change by State, Kind, Queue and BeforeID", name)
	}
	if f.Kind != "" {
		kind = &f.Kind
	}
	if f.Queue != "" {
		if err := channel.ValidateQueue(f.Queue); err != nil {
			return nil, nil, nil, err
		}
		queue = &f.Queue
	}
	switch {
	case f.BeforeID < 0:
		return nil, nil, nil, fmt.Errorf("BeforeID %d is negative", f.BeforeID)
	case f.BeforeID > 0:
		beforeID = &f.BeforeID
	}
	return kind, queue, beforeID, nil
}

// GetJob returns one job with its payload and error history. An id no job
// has is an error wrapping ErrJobNotFound.
func GetJob(ctx context.Context, db DB, id int64) (*JobRow, error) {
	var j JobRow
	var payload, history string
	var metadata, output, policy *string
	err := db.QueryRow(ctx, getJobSQL, id).Scan(append(jobRowFields(&j), &payload, &history, &metadata, &output, &policy)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	j.Payload = json.RawMessage(payload)
	j.Metadata, j.Output, j.Policy = rawOrNil(metadata), rawOrNil(output), rawOrNil(policy)
	if err := json.Unmarshal([]byte(history), &j.Errors); err != nil {
		return nil, fmt.Errorf("get job %d: its errors column is not a list of errors: %w", id, err)
	}
	if j.Errors == nil {
		j.Errors = []AttemptError{}
	}
	return &j, nil
}

// JobPreview is a job as a page or a command shows it: PreviewJob reads
// every field of JobRow, but only the start of a payload that may be
// megabytes long (WriteJobPayload streams the rest), the latest errors of
// a history that, written by hand, may be longer than the runtime keeps,
// and each error text cut.
type JobPreview struct {
	JobRow
	// PayloadText is the start of the payload's JSON text as PostgreSQL
	// prints it, at most the bytes asked for, cut on a whole character:
	// the whole text unless PayloadCut.
	PayloadText string `json:"payload_text"`
	// PayloadBytes is the size of the payload's whole JSON text.
	PayloadBytes int64 `json:"payload_bytes"`
	PayloadCut   bool  `json:"payload_cut"`
	// ErrorsOmitted counts the older errors of the history not read.
	ErrorsOmitted int `json:"errors_omitted"`
}

// Bounds of PreviewJob: the runtime keeps 20 errors per job, each cut to
// 4 000 bytes, so only a history written by hand is ever cut.
const (
	ErrorsShownMax = 20
	ErrorTextMax   = 4000
)

// PreviewJob returns one job as GetJob does, but reads at most
// payloadBytes of its payload's JSON text (0 reads none), the latest
// ErrorsShownMax errors of its history, and each error text (LastError
// too) up to ErrorTextMax characters: what it allocates is bounded
// whatever the row holds. An id no job has is an error wrapping
// ErrJobNotFound.
func PreviewJob(ctx context.Context, db DB, id int64, payloadBytes int) (*JobPreview, error) {
	if payloadBytes < 0 {
		return nil, fmt.Errorf("preview job %d: payloadBytes %d is negative", id, payloadBytes)
	}
	var (
		j                        JobPreview
		prefix                   []byte
		history                  string
		total                    int
		metadata, output, policy *string
	)
	err := db.QueryRow(ctx, previewJobSQL, id, payloadBytes).
		Scan(append(jobRowFields(&j.JobRow), &prefix, &j.PayloadBytes, &history, &total, &metadata, &output, &policy)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("preview job %d: %w", id, err)
	}
	keep := len(prefix)
	if int64(keep) < j.PayloadBytes {
		j.PayloadCut = true
		keep = wholeRunes(prefix)
	}
	j.PayloadText = string(prefix[:keep])
	j.Metadata, j.Output, j.Policy = rawOrNil(metadata), rawOrNil(output), rawOrNil(policy)
	if err := json.Unmarshal([]byte(history), &j.Errors); err != nil {
		return nil, fmt.Errorf("preview job %d: its errors column is not a list of errors: %w", id, err)
	}
	if j.Errors == nil {
		j.Errors = []AttemptError{}
	}
	j.ErrorsOmitted = total - len(j.Errors)
	return &j, nil
}

// wholeRunes returns how much of b ends on a whole UTF-8 character.
func wholeRunes(b []byte) int {
	for k := len(b); k > 0 && len(b)-k < utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k-1]) {
			if utf8.FullRune(b[k-1:]) {
				return len(b)
			}
			return k - 1
		}
	}
	return len(b)
}

// PayloadChunk is how many bytes of a payload's text WriteJobPayload reads
// at a time.
const PayloadChunk = 64 << 10

// WriteJobPayload writes job id's payload, its JSON text as PostgreSQL
// prints it, to w, PayloadChunk bytes at a time: however large the
// payload, it is never held whole. begin, unless nil, is called with the
// text's size before anything is written (an HTTP handler sets its headers
// there); its error stops the copy. An id no job has is an error wrapping
// ErrJobNotFound, returned before begin is called. It returns the bytes
// written.
func WriteJobPayload(ctx context.Context, db DB, id int64, w io.Writer, begin func(size int64) error) (int64, error) {
	rows, err := db.Query(ctx, payloadChunksSQL, id, PayloadChunk)
	if err != nil {
		return 0, fmt.Errorf("read job %d's payload: %w", id, err)
	}
	defer rows.Close()
	var (
		written, size, at int64
		chunk             []byte
		started           bool
	)
	for rows.Next() {
		if err := rows.Scan(&size, &at, &chunk); err != nil {
			return written, fmt.Errorf("read job %d's payload: %w", id, err)
		}
		if at != written+1 {
			return written, fmt.Errorf("read job %d's payload: a chunk from byte %d came after %d bytes", id, at, written)
		}
		if !started {
			started = true
			if begin != nil {
				if err := begin(size); err != nil {
					return 0, err
				}
			}
		}
		n, err := w.Write(chunk)
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("write job %d's payload: %w", id, err)
		}
	}
	if err := rows.Err(); err != nil {
		return written, fmt.Errorf("read job %d's payload: %w", id, err)
	}
	if !started {
		return 0, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	return written, nil
}

func jobRowFields(j *JobRow) []any {
	return []any{&j.ID, &j.Queue, &j.Kind, &j.State, &j.Priority, &j.RunAt, &j.Attempts, &j.MaxAttempts,
		&j.LeaseUntil, &j.LastError, &j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.Worker, &j.Now, &j.Tags,
		&j.WorkflowID, &j.WorkflowStep}
}

// rawOrNil is a nullable JSON column's text as raw JSON, nil for NULL.
func rawOrNil(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// Retry puts jobs that are not running back to pending, due now, as
// River's JobRetry does: dead, cancelled and completed jobs with their
// attempts reset to 0 (their last_error and error history stay), and
// pending jobs due later (scheduled, or waiting out a retry backoff) made
// due now, their attempts kept. Workers of the job's queue are woken at
// once. A job cancelled while it ran is due when that attempt's lease ends
// instead (JobChange.RunsAt), so it never runs beside an attempt its worker
// has not stopped yet. Left alone, each with its reason in Skipped: running
// jobs (cancel them first), pending jobs already due, waiting jobs (their
// flow lets them go), a completed job of a sequence or a batch (the
// sequence has gone on past it, the batch counted it: enqueue a new job),
// and a job whose unique key another job holds (see InsertOpts.UniqueKey),
// naming the key and that job (JobSkip.HeldBy).
func Retry(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	if len(ids) == 0 {
		return res, nil
	}
	err := againOnConflict(ctx, db, func(q DB) error {
		var err error
		res, err = retryRows(ctx, q, retrySQL, ids)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("retry jobs: %w", err)
	}
	res.noteHolders()
	return res, nil
}

// retryRows runs retrySQL or retryWhereSQL, whose rows are (id, state
// before, changed, due later at, unique key, holder, holder's state, flow
// that kept it), and sorts its ids into changed and skipped.
func retryRows(ctx context.Context, db DB, sql string, args ...any) (ChangeResult, error) {
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                      int64
			state, key, holderState *string
			flow                    *string
			changed                 bool
			runsAt                  *time.Time
			holder                  *int64
		)
		if err := rows.Scan(&id, &state, &changed, &runsAt, &key, &holder, &holderState, &flow); err != nil {
			return res, err
		}
		switch {
		case changed && state != nil:
			res.Changed = append(res.Changed, JobChange{ID: id, From: *state, RunsAt: runsAt})
		case state == nil:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, Reason: fmt.Sprintf("job %d does not exist", id)})
		case flow != nil:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, State: *state,
				Reason: fmt.Sprintf("job %d is a completed job of %s, which went on past it: it is not run again (enqueue a new job)", id, *flow)})
		case holder != nil && key != nil && holderState != nil:
			res.Skipped = append(res.Skipped, heldSkip(id, *state, *key, *holder, *holderState))
		default:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, State: *state, Reason: retrySkipReason(id, *state)})
		}
	}
	return res, rows.Err()
}

func retrySkipReason(id int64, state string) string {
	switch state {
	case StateRunning:
		return fmt.Sprintf("job %d is running: cancel it first, or let it finish", id)
	case StatePending:
		return fmt.Sprintf("job %d is already pending, and due", id)
	case StateHeld:
		return fmt.Sprintf("job %d is held: release it to run it", id)
	case StateWaiting:
		return fmt.Sprintf("job %d is waiting for its dependencies or the job before it in its sequence: it runs when they let it (fila jobs show says which)", id)
	}
	return fmt.Sprintf("job %d was %s but changed meanwhile; look at it again", id, state)
}

// heldSkip is a job a retry refused because another job holds its unique
// key.
func heldSkip(id int64, state, key string, holder int64, holderState string) JobSkip {
	return JobSkip{ID: id, State: state, UniqueKey: key, HeldBy: holder, HeldByState: holderState,
		Reason: fmt.Sprintf("job %d: unique key %q is held by %s job %d", id, key, holderState, holder)}
}

// noteHolders rewrites the reason of a job refused behind another job of
// the same retry: that job was not pending when the retry read it,
// and is pending now.
func (r *ChangeResult) noteHolders() {
	if len(r.Skipped) == 0 {
		return
	}
	moved := make(map[int64]bool, len(r.Changed))
	for _, c := range r.Changed {
		moved[c.ID] = true
	}
	for i, s := range r.Skipped {
		if s.HeldBy != 0 && moved[s.HeldBy] {
			r.Skipped[i].HeldByState = StatePending
			r.Skipped[i].Reason = fmt.Sprintf("job %d: unique key %q is held by job %d, which this retry put back to pending", s.ID, s.UniqueKey, s.HeldBy)
		}
	}
}

// againOnConflict runs a retry statement again when it broke
// fila_jobs_unique_idx after all: a job holding a key it was giving out
// was enqueued, or put back to pending, after the statement's snapshot,
// where its lookup of holders could not see it. The next run sees it, and
// skips the job it holds the key of. In the caller's transaction each run
// is a savepoint, so a failed one leaves the transaction usable.
func againOnConflict(ctx context.Context, db DB, run func(DB) error) error {
	var err error
	for range 3 {
		err = savepoint(ctx, db, run)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "fila_jobs_unique_idx" {
			return err
		}
	}
	return fmt.Errorf("jobs with their unique keys kept being enqueued meanwhile; try again: %w", err)
}

// RetryWhere retries, as Retry does, the jobs f selects: f.State is one
// of RetryStates, "dead" by default; f.Kind, f.Queue and f.BeforeID narrow
// the selection, and f.Limit, if set, retries only that many, oldest
// first. One statement retries them all; the jobs it leaves alone (their
// unique key is held, or they are completed jobs of a sequence or a batch)
// are in Skipped, each with its reason.
func RetryWhere(ctx context.Context, db DB, f JobFilter) (ChangeResult, error) {
	if f.State == "" {
		f.State = StateDead
	}
	if !slices.Contains(RetryStates(), f.State) {
		if err := checkJobState(f.State); err != nil {
			return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
		}
		return ChangeResult{}, fmt.Errorf("retry jobs: %s jobs cannot be retried by state: only %s ones", f.State, strings.Join(RetryStates(), ", "))
	}
	if f.Limit < 0 {
		return ChangeResult{}, fmt.Errorf("retry jobs: Limit %d is negative", f.Limit)
	}
	var limit *int64
	if f.Limit > 0 {
		l := int64(f.Limit)
		limit = &l
	}
	kind, queue, before, err := filterArgs(f)
	if err != nil {
		return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
	}
	sql := fmt.Sprintf(retryWhereSQL, stateCondition(f.State, "j"))
	var res ChangeResult
	err = againOnConflict(ctx, db, func(q DB) error {
		res, err = retryRows(ctx, q, sql, kind, queue, before, limit)
		return err
	})
	if err != nil {
		return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
	}
	res.noteHolders()
	return res, nil
}

// Cancel cancels waiting, pending and running jobs: a waiting or pending
// job will not run (what waits for it goes on as its flow says), and
// a running one has its handler's context cancelled by its worker within
// one heartbeat (with ErrCancelled as the cause), and no outcome written for
// that attempt. A job cancelled while it ran keeps its attempt's
// lease_until, the time by which its worker has surely stopped it. Jobs
// already finished (completed, dead or cancelled) are left as they are.
func Cancel(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res, err := changeJobs(ctx, db, cancelSQL, ids, func(id int64, state string) string {
		switch state {
		case StateCompleted, StateDead, StateCancelled:
			return fmt.Sprintf("job %d is already %s", id, state)
		}
		return fmt.Sprintf("job %d was %s but finished meanwhile; look at it again", id, state)
	})
	if err != nil {
		return res, fmt.Errorf("cancel jobs: %w", err)
	}
	return res, nil
}

// Delete deletes jobs in any state but running: a running job's worker
// still owns it (cancel it first). Deleting a pending job means it never
// runs, and leaves no trace of it.
func Delete(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res, err := changeJobs(ctx, db, deleteSQL, ids, func(id int64, state string) string {
		if state == StateRunning {
			return fmt.Sprintf("job %d is running: cancel it first", id)
		}
		return fmt.Sprintf("job %d was %s but started running meanwhile: cancel it first", id, state)
	})
	if err != nil {
		return res, fmt.Errorf("delete jobs: %w", err)
	}
	return res, nil
}

// CancelWhere cancels, as Cancel does, the jobs f selects: f.State is
// "pending", "running", "scheduled" or "retrying" (required: a cancel of
// every job is not meant by default); f.Kind, f.Queue and f.BeforeID
// narrow the selection, and f.Limit, if set, cancels only that many,
// oldest first. One statement cancels them all, each under its row lock.
func CancelWhere(ctx context.Context, db DB, f JobFilter) (ChangeResult, error) {
	switch {
	case slices.Contains(CancelStates(), f.State):
	case f.State == "":
		return ChangeResult{}, errors.New("cancel jobs: give the state of the jobs to cancel: waiting, pending, running, scheduled or retrying")
	default:
		if err := checkJobState(f.State); err != nil {
			return ChangeResult{}, fmt.Errorf("cancel jobs: %w", err)
		}
		return ChangeResult{}, fmt.Errorf("cancel jobs: %s jobs are finished already: only waiting, pending (scheduled, retrying) or running ones can be cancelled", f.State)
	}
	res, err := changeWhere(ctx, db, cancelWhereSQL, f)
	if err != nil {
		return res, fmt.Errorf("cancel jobs: %w", err)
	}
	return res, nil
}

// DeleteWhere deletes, as Delete does, the jobs f selects: f.State is
// "dead", "cancelled", "pending", "scheduled" or "retrying" (required);
// f.Kind, f.Queue and f.BeforeID narrow the selection, and f.Limit, if
// set, deletes only that many, oldest first. Running jobs are refused
// (cancel them first), and so are completed ones: retention deletes those
// (Config.Retention), in small batches that hold up nothing.
func DeleteWhere(ctx context.Context, db DB, f JobFilter) (ChangeResult, error) {
	switch {
	case slices.Contains(DeleteStates(), f.State):
	case f.State == "":
		return ChangeResult{}, errors.New("delete jobs: give the state of the jobs to delete: dead, cancelled, waiting, pending, scheduled or retrying")
	case f.State == StateRunning:
		return ChangeResult{}, errors.New("delete jobs: running jobs cannot be deleted: cancel them first")
	case f.State == StateCompleted:
		return ChangeResult{}, errors.New("delete jobs: completed jobs are deleted by retention (Retention, --retention); delete some by id")
	default:
		return ChangeResult{}, fmt.Errorf("delete jobs: %w", checkJobState(f.State))
	}
	res, err := changeWhere(ctx, db, deleteWhereSQL, f)
	if err != nil {
		return res, fmt.Errorf("delete jobs: %w", err)
	}
	return res, nil
}

// changeWhere runs cancelWhereSQL or deleteWhereSQL for f, whose rows are
// (id, state before, changed).
func changeWhere(ctx context.Context, db DB, sql string, f JobFilter) (ChangeResult, error) {
	if f.Limit < 0 {
		return ChangeResult{}, fmt.Errorf("Limit %d is negative", f.Limit)
	}
	var limit *int64
	if f.Limit > 0 {
		l := int64(f.Limit)
		limit = &l
	}
	kind, queue, before, err := filterArgs(f)
	if err != nil {
		return ChangeResult{}, err
	}
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	rows, err := db.Query(ctx, fmt.Sprintf(sql, stateCondition(f.State, "j")), kind, queue, before, limit)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id      int64
			state   string
			changed bool
		)
		if err := rows.Scan(&id, &state, &changed); err != nil {
			return res, err
		}
		if changed {
			res.Changed = append(res.Changed, JobChange{ID: id, From: state})
		} else {
			res.Skipped = append(res.Skipped, JobSkip{ID: id, State: state,
				Reason: fmt.Sprintf("job %d was %s but changed meanwhile; look at it again", id, state)})
		}
	}
	return res, rows.Err()
}

// changeJobs runs one of the by-id statements, whose rows are (id, state
// before, changed, due later at, unique key, its holder, the holder's
// state), and sorts its ids into changed and skipped.
func changeJobs(ctx context.Context, db DB, sql string, ids []int64, reason func(id int64, state string) string) (ChangeResult, error) {
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	if len(ids) == 0 {
		return res, nil
	}
	rows, err := db.Query(ctx, sql, ids)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id          int64
			state       *string
			changed     bool
			runsAt      *time.Time
			key         *string
			holder      *int64
			holderState *string
		)
		if err := rows.Scan(&id, &state, &changed, &runsAt, &key, &holder, &holderState); err != nil {
			return res, err
		}
		switch {
		case changed && state != nil:
			res.Changed = append(res.Changed, JobChange{ID: id, From: *state, RunsAt: runsAt})
		case state == nil:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, Reason: fmt.Sprintf("job %d does not exist", id)})
		case holder != nil && key != nil && holderState != nil:
			res.Skipped = append(res.Skipped, heldSkip(id, *state, *key, *holder, *holderState))
		default:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, State: *state, Reason: reason(id, *state)})
		}
	}
	return res, rows.Err()
}
