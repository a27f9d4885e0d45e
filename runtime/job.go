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
	// Metadata is what the inserter attached to the job (InsertOpts.Metadata,
	// insert middleware such as a trace context), a JSON object; nil when
	// none. Tags are its tags.
	Metadata json.RawMessage
	Tags     []string

	// rawPolicy is the job's own timeout and retries (InsertOpts.Timeout
	// and Retry) as its claim returned them; see policy.
	rawPolicy json.RawMessage

	completedInTx atomic.Bool
	ownedUntil    atomic.Int64                  // see OwnedUntil: nanoseconds since monoBase
	renewed       atomic.Pointer[chan struct{}] // see Renewed: made by its first call
	output        []byte                        // see SetOutput; set by the handler's goroutine only

	// own is the completer's record of this attempt, and ctx the handler's
	// context, kept in the job so that a claim allocates fewer objects per
	// job.
	own attempt
	ctx jobContext
}

// OutputMax bounds what SetOutput records, in bytes of JSON.
const OutputMax = claimer.OutputMax

// ErrOutputTooLarge is wrapped by SetOutput's error for a value whose JSON
// is longer than OutputMax.
var ErrOutputTooLarge = errors.New("fila: job output too large")

// SetOutput records v, as JSON, to be stored as the job's output when the
// attempt succeeds (with its completion, or by CompleteTx), for operators
// (fila jobs show, the dashboard) and for the jobs that follow it. The last
// call before the handler returns wins; nil records nothing. Outputs are
// small: at most OutputMax bytes of JSON, or an error wrapping
// ErrOutputTooLarge. A failed attempt's output is not kept.
func (j *Job) SetOutput(v any) error {
	if v == nil {
		j.output = nil
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("job %d output: %w", j.ID, err)
	}
	if len(b) > OutputMax {
		return fmt.Errorf("job %d output: %w: %d bytes of JSON, at most %d", j.ID, ErrOutputTooLarge, len(b), OutputMax)
	}
	j.output = b
	return nil
}

func newJob(cj *claimer.Job) *Job {
	j := new(Job)
	j.fill(cj)
	return j
}

// fill sets a zero job's fields from its claim.
func (j *Job) fill(cj *claimer.Job) {
	j.ID, j.Queue, j.Kind, j.Payload, j.Priority = cj.ID, cj.Queue, cj.Kind, cj.Payload, cj.Priority
	j.Attempt, j.MaxAttempts, j.CreatedAt = cj.Attempt.Attempt, cj.MaxAttempts, cj.CreatedAt
	j.StartedAt, j.Wait, j.Metadata, j.Tags, j.rawPolicy = cj.StartedAt, cj.Wait, cj.Metadata, cj.Tags, cj.Policy
}

// jobBlock is how many jobs of one claim share an allocation: one per job
// was a tenth of a drain's allocations, and a block keeps a finished job's
// memory only while another of its block is still referenced (32 jobs,
// some 15 KB, at most).
const jobBlock = 32

// monoBase is the origin of the job's local deadlines: a time.Time with a
// monotonic reading, so a deadline never moves with the wall clock.
var monoBase = time.Now()

// OwnedUntil is the local time at which this worker stops owning the
// attempt unless it renews the lease first. At that moment the handler's
// context is cancelled with ErrLeaseLost, whether or not the database can
// be reached: a worker cut off from it, or whose heartbeats find the row
// locked, stops before the lease it can no longer prove runs out and
// another worker may start the job. It is counted from before the
// statement that last extended the lease was sent, minus a margin of a
// sixth of Config.Lease. Each renewal moves it later (see Renewed).
// Anything a handler starts that could outlive it, such as a child
// process, must end by then; `fila work --exec` hands it to a guard that
// kills the command's whole tree even while the worker itself is frozen.
func (j *Job) OwnedUntil() time.Time {
	return monoBase.Add(time.Duration(j.ownedUntil.Load()))
}

// Renewed receives a value (one for several, if they come faster than they
// are read) each time a heartbeat moves OwnedUntil later.
//
// The channel is made by the first call, as few handlers ask for it: it
// then holds the value that the claim's own setting of OwnedUntil would
// have left in a channel made with the job, so a handler sees the same
// either way.
func (j *Job) Renewed() <-chan struct{} {
	if p := j.renewed.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{}, 1)
	if j.ownedUntil.Load() != 0 {
		ch <- struct{}{}
	}
	if j.renewed.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *j.renewed.Load()
}

// setOwnedUntil moves OwnedUntil to t and says so on Renewed, once a
// handler has asked for it (see Renewed).
func (j *Job) setOwnedUntil(t time.Time) {
	j.ownedUntil.Store(int64(t.Sub(monoBase)))
	if p := j.renewed.Load(); p != nil {
		select {
		case *p <- struct{}{}:
		default:
		}
	}
}

// IdempotencyKey is a key for the job's external effects that stays the same
// across attempts, so a payment gateway or a unique constraint can turn a
// second delivery of the same job into a no-op.
func (j *Job) IdempotencyKey() string { return "fila-job-" + strconv.FormatInt(j.ID, 10) }

// Decode unmarshals the payload into v. A payload that does not fit is a
// permanent error: retrying cannot fix it. So is a JSON null payload decoded
// into a struct or a map: json.Unmarshal would leave v untouched and the
// handler would run on zero values. The table accepts null like any JSON
// value: from a plain SQL insert, `fila enqueue --payload null`, or an
// Insert whose payload marshals to null (a nil pointer or map,
// json.RawMessage("null")); only a nil payload becomes {}.
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

// snoozeError asks for the job to run again after d.
type snoozeError struct{ d time.Duration }

func (e snoozeError) Error() string { return fmt.Sprintf("fila: snoozed for %s", e.d) }

// Snooze returns an error that, returned by a handler, puts the job back to
// pending to run again in d (at once for d <= 0), without spending an
// attempt: the handler waits for something outside the job (a resource
// not ready yet, a window not open yet), nothing failed. Its errors and
// last_error are left as they were. A job may snooze any number of times.
func Snooze(d time.Duration) error { return snoozeError{max(d, 0)} }

// retryAfterError is a failure whose retry is due after d.
type retryAfterError struct {
	err error
	d   time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err, a handler's failure, so that its retry is due after
// d rather than after the backoff: an upstream's Retry-After, say. It is a
// failed attempt like any other, counted against max_attempts (after the
// last one the job is dead), and err is its error. Permanent(err) inside
// or around it still makes the job dead at once.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return retryAfterError{err: err, d: max(d, 0)}
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
// *pgx.Conn or a pgx.Tx (to act inside the caller's transaction), or a
// database/sql handle wrapped by SQL (a *sql.Tx, *sql.DB or *sql.Conn). It
// is the store's own interface, so a transaction handed to runtime reaches
// claimer (CompleteTx) as it is.
type DB = claimer.DB

// CompleteTx marks job completed inside tx, the handler's own transaction, so
// the handler's effect and the completion commit together or not at all. It
// returns an error wrapping ErrNotOwner when the attempt is no longer this
// worker's; roll tx back then. Once CompleteTx succeeded the runtime
// writes nothing more for the attempt, so a handler that calls it must commit
// tx before returning nil (a rolled-back completion leaves the job to be
// rescued when its lease expires, and run again).
func CompleteTx(ctx context.Context, tx DB, job *Job) error {
	if err := claimer.CompleteTx(ctx, tx, job.attempt(), job.output); err != nil {
		return err
	}
	job.completedInTx.Store(true)
	return nil
}

// IsSnooze reports whether err is a Snooze: the attempt is given back and
// the job runs again later, nothing failed.
func IsSnooze(err error) bool {
	var s snoozeError
	return errors.As(err, &s)
}

// OutcomeOf is what the runtime makes of a handler's return: err returned
// for job, whose attempt's context is ctx. Middleware calls it after next
// returns to name the attempt's outcome (OutcomeCompleted, OutcomeSnoozed,
// OutcomeRetried, OutcomeDead, OutcomeCancelled, OutcomeLeaseLost,
// OutcomeReleased) before it is written; the write itself may still find
// the attempt no longer this worker's.
func OutcomeOf(ctx context.Context, job *Job, err error) Outcome {
	return handlerOutcome(job, err, context.Cause(ctx))
}

// handlerOutcome is OutcomeOf given the attempt's cancellation cause.
func handlerOutcome(job *Job, err, cause error) Outcome {
	res := mapResult(job, err, cause, noBackoff, RetryPolicy{})
	switch res.kind {
	case resultOK, resultCompletedInTx:
		return OutcomeCompleted
	case resultLeaseLost:
		return OutcomeLeaseLost
	case resultCancelled:
		return OutcomeCancelled
	case resultInterrupted:
		return OutcomeReleased
	case resultSnoozed:
		return OutcomeSnoozed
	}
	if res.permanent || job.Attempt >= job.MaxAttempts {
		return OutcomeDead
	}
	return OutcomeRetried
}

func noBackoff(int) time.Duration { return 0 }

// commandEnvKey carries the variables of WithCommandEnv.
type commandEnvKey struct{}

// WithCommandEnv returns ctx with vars ("NAME=value") added to the
// environment of the commands a handler starts: `fila work --exec` gives
// them to each command. Middleware passes on this way what a command needs
// to know of its attempt, such as its trace context (TRACEPARENT).
func WithCommandEnv(ctx context.Context, vars ...string) context.Context {
	prev := CommandEnv(ctx)
	return context.WithValue(ctx, commandEnvKey{}, append(prev[:len(prev):len(prev)], vars...))
}

// CommandEnv is the environment WithCommandEnv added to ctx, nil for none.
func CommandEnv(ctx context.Context) []string {
	v, _ := ctx.Value(commandEnvKey{}).([]string)
	return v
}
