package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
var jobStates = []string{"pending", "running", "completed", "dead", "cancelled"}

// JobStates returns the states a job can be in: pending, running,
// completed, dead and cancelled.
func JobStates() []string { return append([]string(nil), jobStates...) }

// JobFilter selects jobs for ListJobs and RetryWhere. Empty fields select
// everything.
type JobFilter struct {
	// State is one of JobStates. ListJobs defaults to any state; RetryWhere
	// to "dead", and accepts only "dead" or "cancelled".
	State string
	// Kind selects one job kind.
	Kind string
	// Queue selects one queue.
	Queue string
	// BeforeID selects jobs whose id is below it: the next page of a
	// newest-first listing starts before its last id.
	BeforeID int64
	// Limit caps the jobs ListJobs returns (defaults to ListLimitDefault;
	// allowed 1 to ListLimitMax) and the jobs RetryWhere retries, oldest
	// first (defaults to every match).
	Limit int
}

// JobRow is one row of fila_jobs, as an operator reads it.
type JobRow struct {
	ID          int64      `json:"id"`
	Queue       string     `json:"queue"`
	Kind        string     `json:"kind"`
	State       string     `json:"state"`
	Priority    int16      `json:"priority"`
	RunAt       time.Time  `json:"run_at"`
	Attempts    int        `json:"attempts"`
	MaxAttempts int        `json:"max_attempts"`
	LeaseUntil  *time.Time `json:"lease_until"`
	// LastError is the latest failed attempt's error, "" when none failed.
	LastError  string     `json:"last_error"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
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
	// RunsAt is set when a retried job is due later than now: it was
	// cancelled while it ran, and runs again once that attempt's lease has
	// ended.
	RunsAt *time.Time `json:"runs_at,omitempty"`
}

// JobSkip is one job that was left alone.
type JobSkip struct {
	ID int64 `json:"id"`
	// State is the job's state, "" when no job has the id.
	State string `json:"state,omitempty"`
	// Reason says why, in a sentence that names the job.
	Reason string `json:"reason"`
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
	manageColumns = `id, queue, kind, state, priority, run_at, attempts, max_attempts, lease_until,
       coalesce(last_error, ''), created_at, started_at, finished_at`

	// %s is the state condition (see stateCondition). Which index serves a
	// listing depends on the state asked for: pending rows come from
	// fila_jobs_pending_idx or fila_jobs_scheduled_idx, running ones from
	// fila_jobs_lease_idx, dead ones from fila_jobs_dead_idx, cancelled
	// ones from fila_jobs_cancelled_idx, all partial indexes on their
	// state. Completed rows, and a listing of every state, walk the primary
	// key backwards: the newest rows come first, and most rows qualify. No
	// index leads with kind or queue across states: a filter on them alone
	// that few rows match reads the whole table, so give a state along with
	// them where the table is large.
	listJobsSQL = `SELECT ` + manageColumns + `
FROM fila_jobs
WHERE %s
  AND ($1::text IS NULL OR kind = $1::text)
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::bigint IS NULL OR id < $3::bigint)
ORDER BY %s
LIMIT $4::int`

	getJobSQL = `SELECT ` + manageColumns + `, payload::text, errors::text
FROM fila_jobs
WHERE id = $1::bigint`

	// Retry keeps last_error and errors: the history of what went wrong
	// stays readable after the job runs again. Its update to pending wakes
	// the queue's workers through the table's update trigger.
	//
	// A job cancelled while it ran still has the lease of its cancelled
	// attempt (see cancelSQL): until the lease ends, the worker may not have
	// stopped that attempt yet, so the retried job is due only then. Every
	// other job is due now.
	retrySet = `state = 'pending', run_at = greatest(now(), j.lease_until), attempts = 0,
        lease_until = NULL, finished_at = NULL`

	retrySQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), changed AS (
    UPDATE fila_jobs j
    SET ` + retrySet + `
    WHERE j.id IN (SELECT id FROM want) AND j.state IN ('dead', 'cancelled')
    RETURNING j.id, j.run_at
)
SELECT w.id, j.state, c.id IS NOT NULL, CASE WHEN c.run_at > now() THEN c.run_at END
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`

	// %s is the state condition; only "dead" or "cancelled".
	retryWhereSQL = `WITH picked AS (
    SELECT id FROM fila_jobs
    WHERE %s
      AND ($1::text IS NULL OR kind = $1::text)
      AND ($2::text IS NULL OR queue = $2::text)
      AND ($3::bigint IS NULL OR id < $3::bigint)
    ORDER BY id
    LIMIT $4::bigint
    FOR UPDATE
)
UPDATE fila_jobs j
SET ` + retrySet + `
FROM picked
WHERE j.id = picked.id AND j.%s
RETURNING j.id, CASE WHEN j.run_at > now() THEN j.run_at END`

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
    WHERE j.id IN (SELECT id FROM want) AND j.state IN ('pending', 'running')
    RETURNING j.id
)
SELECT w.id, j.state, c.id IS NOT NULL, NULL::timestamptz
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`

	deleteSQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), changed AS (
    DELETE FROM fila_jobs j
    WHERE j.id IN (SELECT id FROM want) AND j.state <> 'running'
    RETURNING j.id
)
SELECT w.id, j.state, c.id IS NOT NULL, NULL::timestamptz
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`
)

// stateCondition is the WHERE condition selecting one state, "" for any.
// The state is written into the statement as a constant, never passed as a
// parameter: a partial index is used only when the planner can prove its
// WHERE state = '…' from the query, which a generic plan of a parameter
// would not let it do. state must be one of jobStates.
func stateCondition(state string) string {
	if state == "" {
		return "true"
	}
	return "state = '" + state + "'"
}

// listOrder is a listing's ORDER BY. Running, dead and cancelled jobs are few
// beside the history: their listing reads the state's partial index and
// sorts what it finds (ordering by id + 0, which no index provides, so the
// planner does not walk the primary key backwards instead, past every
// other row, to reach a page of them).
func listOrder(state string) string {
	switch state {
	case "running", "dead", "cancelled":
		return "id + 0 DESC"
	}
	return "id DESC"
}

func checkJobState(state string) error {
	for _, s := range jobStates {
		if s == state {
			return nil
		}
	}
	return fmt.Errorf("state %q is unknown: use %s", state, strings.Join(jobStates, ", "))
}

// filterArgs are the parameters $1 to $3 of a filtered statement; NULL
// selects everything.
func filterArgs(f JobFilter) (kind, queue *string, beforeID *int64, err error) {
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

// ListJobs returns the jobs f selects, newest (highest id) first, at most
// f.Limit of them. Payload and Errors are left empty: GetJob reads them.
func ListJobs(ctx context.Context, db DB, f JobFilter) ([]JobRow, error) {
	if f.State != "" {
		if err := checkJobState(f.State); err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
	}
	limit := f.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 1 || limit > ListLimitMax:
		return nil, fmt.Errorf("list jobs: Limit %d out of range: allowed 1 to %d", f.Limit, ListLimitMax)
	}
	kind, queue, before, err := filterArgs(f)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	rows, err := db.Query(ctx, fmt.Sprintf(listJobsSQL, stateCondition(f.State), listOrder(f.State)), kind, queue, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobRow, error) {
		var j JobRow
		err := row.Scan(jobRowFields(&j)...)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	if jobs == nil {
		jobs = []JobRow{}
	}
	return jobs, nil
}

// GetJob returns one job with its payload and error history. An id no job
// has is an error wrapping ErrJobNotFound.
func GetJob(ctx context.Context, db DB, id int64) (*JobRow, error) {
	var j JobRow
	var payload, history string
	err := db.QueryRow(ctx, getJobSQL, id).Scan(append(jobRowFields(&j), &payload, &history)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	j.Payload = json.RawMessage(payload)
	if err := json.Unmarshal([]byte(history), &j.Errors); err != nil {
		return nil, fmt.Errorf("get job %d: its errors column is not a list of errors: %w", id, err)
	}
	if j.Errors == nil {
		j.Errors = []AttemptError{}
	}
	return &j, nil
}

func jobRowFields(j *JobRow) []any {
	return []any{&j.ID, &j.Queue, &j.Kind, &j.State, &j.Priority, &j.RunAt, &j.Attempts, &j.MaxAttempts,
		&j.LeaseUntil, &j.LastError, &j.CreatedAt, &j.StartedAt, &j.FinishedAt}
}

// Retry puts dead and cancelled jobs back to pending, due now, with their
// attempts reset to 0; their last_error and error history stay. Workers of
// the job's queue are woken at once. A job cancelled while it ran is due
// when that attempt's lease ends instead (JobChange.RunsAt), so it never
// runs beside an attempt its worker has not stopped yet. Running jobs are refused (cancel them
// first), and so are completed ones: their effect happened, and running it
// again is a new job's business (enqueue one). Pending jobs are left as
// they are.
func Retry(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res, err := changeJobs(ctx, db, retrySQL, ids, retrySkipReason)
	if err != nil {
		return res, fmt.Errorf("retry jobs: %w", err)
	}
	return res, nil
}

func retrySkipReason(id int64, state string) string {
	switch state {
	case "running":
		return fmt.Sprintf("job %d is running: cancel it first, or let it finish", id)
	case "pending":
		return fmt.Sprintf("job %d is already pending", id)
	case "completed":
		return fmt.Sprintf("job %d is completed: a completed job is not run again (enqueue a new one)", id)
	}
	return fmt.Sprintf("job %d was %s but changed meanwhile; look at it again", id, state)
}

// RetryWhere retries, as Retry does, the jobs f selects: f.State is "dead"
// (the default) or "cancelled"; f.Kind, f.Queue and f.BeforeID narrow the
// selection, and f.Limit, if set, retries only that many, oldest first.
func RetryWhere(ctx context.Context, db DB, f JobFilter) (ChangeResult, error) {
	if f.State == "" {
		f.State = "dead"
	}
	if f.State != "dead" && f.State != "cancelled" {
		if err := checkJobState(f.State); err != nil {
			return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
		}
		return ChangeResult{}, fmt.Errorf("retry jobs: %s jobs cannot be retried: only dead or cancelled ones", f.State)
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
	cond := stateCondition(f.State)
	rows, err := db.Query(ctx, fmt.Sprintf(retryWhereSQL, cond, cond), kind, queue, before, limit)
	if err != nil {
		return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
	}
	changed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobChange, error) {
		c := JobChange{From: f.State}
		err := row.Scan(&c.ID, &c.RunsAt)
		return c, err
	})
	if err != nil {
		return ChangeResult{}, fmt.Errorf("retry jobs: %w", err)
	}
	slices.SortFunc(changed, func(a, b JobChange) int { return cmp.Compare(a.ID, b.ID) })
	if changed == nil {
		changed = []JobChange{}
	}
	return ChangeResult{Changed: changed, Skipped: []JobSkip{}}, nil
}

// Cancel cancels pending and running jobs: a pending job will not run, and
// a running one has its handler's context cancelled by its worker within
// one heartbeat (with ErrCancelled as the cause), and no outcome written for
// that attempt. A job cancelled while it ran keeps its attempt's
// lease_until, the time by which its worker has surely stopped it. Jobs
// already finished (completed, dead or cancelled) are left as they are.
func Cancel(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res, err := changeJobs(ctx, db, cancelSQL, ids, func(id int64, state string) string {
		switch state {
		case "completed", "dead", "cancelled":
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
		if state == "running" {
			return fmt.Sprintf("job %d is running: cancel it first", id)
		}
		return fmt.Sprintf("job %d was %s but started running meanwhile: cancel it first", id, state)
	})
	if err != nil {
		return res, fmt.Errorf("delete jobs: %w", err)
	}
	return res, nil
}

// changeJobs runs one of the by-id statements, whose rows are (id, state
// before, changed, due later at), and sorts its ids into changed and
// skipped.
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
			id      int64
			state   *string
			changed bool
			runsAt  *time.Time
		)
		if err := rows.Scan(&id, &state, &changed, &runsAt); err != nil {
			return res, err
		}
		switch {
		case changed && state != nil:
			res.Changed = append(res.Changed, JobChange{ID: id, From: *state, RunsAt: runsAt})
		case state == nil:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, Reason: fmt.Sprintf("job %d does not exist", id)})
		default:
			res.Skipped = append(res.Skipped, JobSkip{ID: id, State: *state, Reason: reason(id, *state)})
		}
	}
	return res, rows.Err()
}
