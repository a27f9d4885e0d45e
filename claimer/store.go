package claimer

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/finish.sql
	finishSQL string
	//go:embed sql/heartbeat.sql
	heartbeatSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/complete_tx.sql
	completeTxSQL string
	//go:embed sql/retention.sql
	retentionSQL string
)

// DB is what the store needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Job is one claimed attempt of a job.
type Job struct {
	ID          int64
	Queue       string
	Kind        string
	Payload     json.RawMessage
	Priority    int16
	Attempt     int // 1 for the first attempt; the fencing key with ID
	MaxAttempts int
	CreatedAt   time.Time
	RunAt       time.Time
}

// Attempt identifies one attempt: the pair every fenced write checks.
type Attempt struct {
	ID      int64
	Attempt int
}

// ClaimResult is what one claim round trip returns.
type ClaimResult struct {
	Jobs    []*Job
	Rescued int // expired leases returned to pending (or dead) by this round trip
	// NextDue is how long until the next scheduled job of the queue or the
	// next lease expiry, on the database clock; HasNextDue is false when
	// nothing is scheduled or the batch came back full.
	NextDue    time.Duration
	HasNextDue bool
}

// ClaimSQL returns the text of the claim statement Store.Claim runs, so a
// benchmark can time the statement alone, with no runtime around it.
// Parameters: $1 queue, $2 batch limit, $3 lease in milliseconds; the rows
// are Claim's (one per job, then a summary row with a NULL id).
func ClaimSQL() string { return claimSQL }

// Store runs Fila's SQL against a database.
type Store struct{ db DB }

// New returns a Store on db.
func New(db DB) *Store { return &Store{db: db} }

// Claim marks up to limit runnable jobs of queue as running for lease, in one
// statement, and returns them.
func (s *Store) Claim(ctx context.Context, queue string, limit int, lease time.Duration) (ClaimResult, error) {
	var res ClaimResult
	rows, err := s.db.Query(ctx, claimSQL, queue, limit, float64(lease)/float64(time.Millisecond))
	if err != nil {
		return res, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, rescued          *int64
			q, kind, payload     *string
			priority             *int16
			attempts, maxAttempt *int
			createdAt, runAt     *time.Time
			nextDue              *float64
		)
		if err := rows.Scan(&id, &q, &kind, &payload, &priority, &attempts, &maxAttempt, &createdAt, &runAt, &rescued, &nextDue); err != nil {
			return res, fmt.Errorf("claim: scan: %w", err)
		}
		if id == nil { // the summary row
			if rescued != nil {
				res.Rescued = int(*rescued)
			}
			if nextDue != nil && !math.IsNaN(*nextDue) {
				res.HasNextDue = true
				res.NextDue = time.Duration(*nextDue * float64(time.Millisecond))
			}
			continue
		}
		res.Jobs = append(res.Jobs, &Job{
			ID: *id, Queue: *q, Kind: *kind, Payload: json.RawMessage(*payload), Priority: *priority,
			Attempt: *attempts, MaxAttempts: *maxAttempt, CreatedAt: *createdAt, RunAt: *runAt,
		})
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("claim: %w", err)
	}
	return res, nil
}

// Outcome is the result of one attempt, to be written by Finish.
type Outcome struct {
	ID        int64
	Attempt   int
	OK        bool          // the handler succeeded
	Err       string        // why it failed (kept in last_error)
	Delay     time.Duration // retry backoff when not OK and not Permanent
	Permanent bool          // failed in a way retrying cannot fix: dead at once
}

// Finished is how Finish left one job.
type Finished struct {
	ID int64
	// State is the job's new state (completed, pending for a retry, or dead),
	// StateFenced when the attempt is no longer this worker's, or
	// StateSkipped when the row was locked for a moment: write it again.
	State string
	DueIn time.Duration // for a retry: how long until it runs again
}

// States Finish reports besides the job's own.
const (
	StateFenced  = "fenced"
	StateSkipped = "skipped"
)

// Finish writes many outcomes in one statement and says how it left each.
func (s *Store) Finish(ctx context.Context, outs []Outcome) ([]Finished, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(outs))
	attempts := make([]int32, len(outs))
	oks := make([]bool, len(outs))
	errs := make([]string, len(outs))
	delays := make([]float64, len(outs))
	perms := make([]bool, len(outs))
	for i, o := range outs {
		ids[i], attempts[i], oks[i], errs[i], perms[i] = o.ID, int32(o.Attempt), o.OK, o.Err, o.Permanent
		delays[i] = float64(o.Delay) / float64(time.Millisecond)
	}
	rows, err := s.db.Query(ctx, finishSQL, ids, attempts, oks, errs, delays, perms)
	if err != nil {
		return nil, fmt.Errorf("finish %d attempts: %w", len(outs), err)
	}
	out := make([]Finished, 0, len(outs))
	for rows.Next() {
		var f Finished
		var dueMs float64
		if err := rows.Scan(&f.ID, &f.State, &dueMs); err != nil {
			rows.Close()
			return nil, fmt.Errorf("finish: scan: %w", err)
		}
		f.DueIn = time.Duration(dueMs * float64(time.Millisecond))
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finish %d attempts: %w", len(outs), err)
	}
	return out, nil
}

func split(as []Attempt) ([]int64, []int32) {
	ids := make([]int64, len(as))
	attempts := make([]int32, len(as))
	for i, a := range as {
		ids[i], attempts[i] = a.ID, int32(a.Attempt)
	}
	return ids, attempts
}

// Heartbeat extends the leases of owned attempts and returns, for each, whether
// it is still this worker's.
func (s *Store) Heartbeat(ctx context.Context, owned []Attempt, lease time.Duration) (map[int64]bool, error) {
	kept := make(map[int64]bool, len(owned))
	if len(owned) == 0 {
		return kept, nil
	}
	ids, attempts := split(owned)
	rows, err := s.db.Query(ctx, heartbeatSQL, ids, attempts, float64(lease)/float64(time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d jobs: %w", len(owned), err)
	}
	for rows.Next() {
		var id int64
		var ok bool
		if err := rows.Scan(&id, &ok); err != nil {
			rows.Close()
			return nil, fmt.Errorf("heartbeat: scan: %w", err)
		}
		kept[id] = ok
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heartbeat %d jobs: %w", len(owned), err)
	}
	return kept, nil
}

// Release returns owned attempts to pending at once, wakes the other workers,
// and reports how many it released.
func (s *Store) Release(ctx context.Context, owned []Attempt, reason string) (int, error) {
	if len(owned) == 0 {
		return 0, nil
	}
	ids, attempts := split(owned)
	var released, queues int
	if err := s.db.QueryRow(ctx, releaseSQL, ids, attempts, reason).Scan(&released, &queues); err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(owned), err)
	}
	return released, nil
}

// ErrNotOwner is returned by CompleteTx when the attempt is no longer the
// caller's: its lease was rescued, or it already finished.
var ErrNotOwner = errors.New("job attempt is no longer owned by this worker (lease lost or already finished)")

// CompleteTx completes one attempt inside the caller's transaction.
func CompleteTx(ctx context.Context, tx DB, a Attempt) error {
	tag, err := tx.Exec(ctx, completeTxSQL, a.ID, a.Attempt)
	if err != nil {
		return fmt.Errorf("complete job %d in transaction: %w", a.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("complete job %d attempt %d: %w", a.ID, a.Attempt, ErrNotOwner)
	}
	return nil
}

// DeleteCompleted deletes up to batch completed jobs finished more than
// olderThan ago and returns how many it deleted.
func (s *Store) DeleteCompleted(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	tag, err := s.db.Exec(ctx, retentionSQL, olderThan.Seconds(), batch)
	if err != nil {
		return 0, fmt.Errorf("delete completed jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
