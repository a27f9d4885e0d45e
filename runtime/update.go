package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrJobRunning is wrapped by UpdateJob's error when the job is running:
// its worker owns the row until the attempt's outcome is written.
var ErrJobRunning = errors.New("job is running")

// JobUpdate is what UpdateJob changes: each field that is not nil, to the
// value it points at, checked as an insert checks it (InsertOpts).
type JobUpdate struct {
	// Priority: lower runs first.
	Priority *int16
	// RunAt: not before this time. The zero time means now, on the
	// database's clock. A pending job made due within the next minutes
	// wakes its queue's workers, as an insert does.
	RunAt *time.Time
	// Tags replace the job's tags; an empty list removes them.
	Tags *[]string
	// Metadata replaces the job's metadata; nil or empty removes it. The
	// job's own policy (InsertOpts.Timeout and Retry) is not metadata and
	// stays as it was.
	Metadata *map[string]any
	// MaxAttempts: 1 to 1000, and above the attempts the job has made if
	// it is pending.
	MaxAttempts *int
}

// One statement, fenced on the state: a job claimed between the caller's
// read and this update is not changed (the UPDATE waits for the claim's
// row lock, then finds the row running). The trigger on run_at wakes the
// queue when a pending job becomes due (fila_notify_update). The outer
// SELECT reads the state from before the update, to say why nothing
// changed. Replacing the metadata of a job that an older version inserted
// moves the policy it wrote there into the policy column (see
// fila_job_policy in migrations/schema.sql), so the job keeps it.
const updateJobSQL = `WITH u AS (
    UPDATE fila_jobs j SET
        priority = coalesce($2::smallint, j.priority),
        run_at = CASE WHEN $3::boolean THEN coalesce($4::timestamptz, now()) ELSE j.run_at END,
        tags = CASE WHEN $5::boolean THEN string_to_array($6::text, E'\x1f') ELSE j.tags END,
        metadata = CASE WHEN $7::boolean THEN nullif(coalesce($8::text::jsonb, '{}'), '{}') ELSE j.metadata END,
        policy = CASE WHEN $7::boolean THEN fila_job_policy(j.policy, j.metadata) ELSE j.policy END,
        max_attempts = coalesce($9::int, j.max_attempts)
    WHERE j.id = $1::bigint AND j.state <> 'running'
    RETURNING j.id
)
SELECT (SELECT state FROM fila_jobs WHERE id = $1::bigint), (SELECT id FROM u)`

// UpdateJob changes a job that is not running (waiting, pending or
// finished) and returns it as it is now. A running job is refused with an
// error wrapping ErrJobRunning (cancel it first, or wait for it); an id no
// job has, with one wrapping ErrJobNotFound. Values are checked as Insert
// checks them; db may be the caller's transaction.
func UpdateJob(ctx context.Context, db DB, id int64, u JobUpdate) (*JobRow, error) {
	var opts InsertOpts
	if u.Tags != nil {
		opts.Tags = *u.Tags
	}
	if u.Metadata != nil {
		opts.Metadata = *u.Metadata
	}
	var r insertRow
	if err := prepareTags(&r, opts); err != nil {
		return nil, fmt.Errorf("update job %d: %w", id, err)
	}
	var maxAttempts *int32
	if u.MaxAttempts != nil {
		if *u.MaxAttempts < 1 || *u.MaxAttempts > 1000 {
			return nil, fmt.Errorf("update job %d: max attempts %d out of range: allowed 1 to 1000", id, *u.MaxAttempts)
		}
		m := int32(*u.MaxAttempts)
		maxAttempts = &m
	}
	var runAt *time.Time
	if u.RunAt != nil && !u.RunAt.IsZero() {
		runAt = u.RunAt
	}
	var (
		before *string
		gotID  *int64
	)
	err := db.QueryRow(ctx, updateJobSQL, id, u.Priority, u.RunAt != nil, runAt,
		u.Tags != nil, r.tags, u.Metadata != nil, r.metadata, maxAttempts).Scan(&before, &gotID)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.ConstraintName == "fila_jobs_attempts_in_bounds" || pgErr.ConstraintName == "fila_jobs_pending_needs_attempt_left") {
			return nil, fmt.Errorf("update job %d: max attempts %d is not above the attempts the job has made", id, *u.MaxAttempts)
		}
		return nil, fmt.Errorf("update job %d: %w", id, err)
	}
	switch {
	case before == nil:
		return nil, fmt.Errorf("update job %d: %w", id, ErrJobNotFound)
	case gotID == nil && *before == StateRunning:
		return nil, fmt.Errorf("update job %d: %w: cancel it first, or let it finish", id, ErrJobRunning)
	case gotID == nil:
		return nil, fmt.Errorf("update job %d: %w: it started running meanwhile", id, ErrJobRunning)
	}
	return GetJob(ctx, db, id)
}
