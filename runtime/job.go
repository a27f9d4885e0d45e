package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fila-run/fila/claimer"
)

// Job is one attempt of a job, as a handler sees it.
type Job struct {
	ID          int64
	Queue       string
	Kind        string
	Payload     json.RawMessage
	Priority    int16
	Attempt     int // 1 on the first attempt
	MaxAttempts int
	CreatedAt   time.Time
	// StartedAt is when this attempt was claimed, on the database clock.
	StartedAt time.Time
	// Wait is how long the job waited to be claimed, from the later of its
	// creation and its run_at, on the database clock.
	Wait time.Duration

	completedInTx atomic.Bool
}

func newJob(cj *claimer.Job) *Job {
	return &Job{ID: cj.ID, Queue: cj.Queue, Kind: cj.Kind, Payload: cj.Payload, Priority: cj.Priority,
		Attempt: cj.Attempt.Attempt, MaxAttempts: cj.MaxAttempts, CreatedAt: cj.CreatedAt,
		StartedAt: cj.StartedAt, Wait: cj.Wait}
}

// IdempotencyKey is a key for the job's external effects that stays the same
// across attempts, so a payment gateway or a unique constraint can turn a
// second delivery of the same job into a no-op.
func (j *Job) IdempotencyKey() string { return "fila-job-" + strconv.FormatInt(j.ID, 10) }

// Decode unmarshals the payload into v. A payload that does not fit is a
// permanent error: retrying cannot fix it. So is a JSON null payload (which
// only a plain SQL insert can store) decoded into a struct or a map:
// json.Unmarshal would leave v untouched and the handler would run on zero
// values.
func (j *Job) Decode(v any) error {
	if string(bytes.TrimSpace(j.Payload)) == "null" && wantsObject(v) {
		return Permanent(fmt.Errorf("payload of job %d (kind %q) is null, not a JSON object", j.ID, j.Kind))
	}
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return Permanent(fmt.Errorf("payload of job %d (kind %q) does not decode: %w", j.ID, j.Kind, err))
	}
	return nil
}

// wantsObject reports whether v points to a struct or a map.
func wantsObject(v any) bool {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map)
}

func (j *Job) attempt() claimer.Attempt {
	return claimer.Attempt{ID: j.ID, Attempt: j.Attempt, StartedAt: j.StartedAt}
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the job goes to dead at once, with err as its
// last_error, instead of being retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// ErrLeaseLost is the cause of a handler's context cancellation when the
// worker no longer owns the attempt (its lease expired and the job was
// rescued, or a heartbeat could not be written in time). The handler should
// stop; its result will be rejected.
var ErrLeaseLost = errors.New("fila: lease lost; another worker may run this job")

// ErrShutdown is the cause of a handler's context cancellation at a hard stop.
var ErrShutdown = errors.New("fila: worker shutting down")

// ErrCancelled is the cause of a handler's context cancellation when an
// operator cancelled the job (Cancel, `fila jobs cancel`, or an UPDATE to
// state 'cancelled'). It is noticed within one heartbeat interval. The
// handler should stop; nothing more is written for the attempt.
var ErrCancelled = errors.New("fila: job cancelled")

// ErrNotOwner is wrapped by CompleteTx's error when the attempt is no longer
// the caller's: its lease was rescued, the job was cancelled, or it already
// finished.
var ErrNotOwner = claimer.ErrNotOwner

// DB is what the insert and job functions need: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx (to act inside the caller's transaction).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CompleteTx marks job completed inside tx, the handler's own transaction, so
// the handler's effect and the completion commit together or not at all. It
// returns an error wrapping ErrNotOwner when the attempt is no longer this
// worker's; roll tx back then. Once CompleteTx succeeded the runtime
// writes nothing more for the attempt, so a handler that calls it must commit
// tx before returning nil (a rolled-back completion leaves the job to be
// rescued when its lease expires, and run again).
func CompleteTx(ctx context.Context, tx DB, job *Job) error {
	if err := claimer.CompleteTx(ctx, tx, job.attempt()); err != nil {
		return err
	}
	job.completedInTx.Store(true)
	return nil
}
