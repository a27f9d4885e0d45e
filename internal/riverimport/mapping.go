package riverimport

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

// MetadataKey is the key of an imported job's metadata that holds its River
// id: how a later import knows the job has moved already.
const MetadataKey = "river_job_id"

// errorsKept is how many of a job's latest errors move: the runtime keeps
// as many (fila_append_error drops the oldest past 20).
const errorsKept = 20

// River's job states (river_job_state).
const (
	stateAvailable = "available"
	stateScheduled = "scheduled"
	stateRetryable = "retryable"
	stateRunning   = "running"
	statePending   = "pending"
	stateCompleted = "completed"
	stateCancelled = "cancelled"
	stateDiscarded = "discarded"
)

// interruptedError is the error an imported running job's interrupted
// attempt records.
const interruptedError = "running in River when imported into Fila: the attempt was interrupted"

// riverJob is one row of river_job, as read.
type riverJob struct {
	id                       int64
	state                    string
	attempt, maxAttempts     int
	attemptedAt, finalizedAt *time.Time
	createdAt, scheduledAt   time.Time
	priority                 int16
	args, kind, queue        string
	metadata                 string
	errors, tags             []string
}

// riverError is an element of river_job.errors (rivertype.AttemptError).
type riverError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace"`
}

// filaJob is the fila_jobs row a River job becomes.
type filaJob struct {
	riverID                     int64
	queue, kind, payload, state string
	priority                    int16
	runAt                       *time.Time // nil: the database's now()
	attempts, maxAttempts       int32
	lastError                   *string
	createdAt                   time.Time
	startedAt, finishedAt       *time.Time
	errors, metadata            string
	tags                        *string // joined by U+001F, as runtime's insert sends them
}

// filaState is the Fila state a River state moves to, "" for one that does
// not move (pending: it waits on something only River Pro releases).
func filaState(riverState string) string {
	switch riverState {
	case stateAvailable, stateScheduled, stateRetryable, stateRunning:
		return "pending"
	case stateCompleted:
		return "completed"
	case stateCancelled:
		return "cancelled"
	case stateDiscarded:
		return "dead"
	}
	return ""
}

// mapJob turns a River job into its Fila row, or says why it cannot move.
// now is the database's clock, for the error a running job's interrupted
// attempt records.
func mapJob(r riverJob, limits runtime.PayloadLimits, now time.Time) (filaJob, error) {
	f := filaJob{
		riverID:     r.id,
		queue:       r.queue,
		kind:        r.kind,
		payload:     r.args,
		state:       filaState(r.state),
		attempts:    int32(r.attempt),
		maxAttempts: int32(r.maxAttempts),
		createdAt:   r.createdAt,
		startedAt:   r.attemptedAt,
		finishedAt:  r.finalizedAt,
		// River's priorities are 1 (first) to 4, its default 1; Fila's
		// lower runs first too, its default 0.
		priority: r.priority - 1,
	}
	if f.state == "" {
		return f, fmt.Errorf("state %q does not move to Fila", r.state)
	}
	if err := runtime.ValidateKind(r.kind); err != nil {
		return f, err
	}
	if err := channel.ValidateQueue(r.queue); err != nil {
		return f, fmt.Errorf("queue %q: %w", r.queue, err)
	}
	if r.maxAttempts < 1 || r.maxAttempts > 1000 {
		return f, fmt.Errorf("max attempts %d out of Fila's range 1 to 1000", r.maxAttempts)
	}
	if err := limits.Check([]byte(r.args)); err != nil {
		return f, fmt.Errorf("args %w", err)
	}

	errs, err := mapErrors(r.errors)
	if err != nil {
		return f, err
	}
	if f.state == "pending" {
		// A scheduled or retryable job runs at its scheduled_at, an
		// available one too (in the past, so its place in line is kept).
		at := r.scheduledAt
		f.runAt = &at
	}
	if r.state == stateRunning {
		// As River's rescuer treats a stuck job: the attempt counts, and
		// one out of attempts is discarded.
		errs = append(errs, runtime.AttemptError{Attempt: r.attempt, At: now, Error: interruptedError})
		f.runAt = nil
		if r.attempt >= r.maxAttempts {
			f.state = "dead"
			f.finishedAt = &now
		}
	}
	if f.state == "pending" && f.attempts >= f.maxAttempts {
		return f, fmt.Errorf("%s with attempt %d of max attempts %d: Fila runs a job only while it has an attempt left", r.state, r.attempt, r.maxAttempts)
	}
	if f.attempts > f.maxAttempts {
		return f, fmt.Errorf("attempt %d is past max attempts %d", r.attempt, r.maxAttempts)
	}
	if f.finishedAt == nil && f.state != "pending" {
		f.finishedAt = &now // River requires finalized_at; an edited row may lack it
	}
	if len(errs) > errorsKept {
		errs = errs[len(errs)-errorsKept:]
	}
	if len(errs) > 0 { // kept by a completion too, as the runtime does
		last := errs[len(errs)-1].Error
		f.lastError = &last
	}
	b, err := json.Marshal(errs)
	if err != nil {
		return f, fmt.Errorf("errors: %w", err)
	}
	f.errors = string(b)

	if f.tags, err = mapTags(r.tags); err != nil {
		return f, err
	}
	if f.metadata, err = mapMetadata(r.id, r.metadata); err != nil {
		return f, err
	}
	return f, nil
}

// mapErrors turns River's errors into Fila's format. River's trace (of a
// panic) has no field of its own in Fila: it follows the error text, which
// is cut to what the runtime keeps.
func mapErrors(raw []string) ([]runtime.AttemptError, error) {
	errs := make([]runtime.AttemptError, 0, len(raw))
	for i, s := range raw {
		var e riverError
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return nil, fmt.Errorf("error %d of its history is not River's {at, attempt, error, trace}: %w", i+1, err)
		}
		text := e.Error
		if e.Trace != "" {
			text += "\n" + e.Trace
		}
		errs = append(errs, runtime.AttemptError{Attempt: e.Attempt, At: e.At, Error: claimer.StorableText(text, claimer.ErrorTextMax)})
	}
	return errs, nil
}

// mapTags checks River's tags against Fila's bounds and joins them.
func mapTags(tags []string) (*string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > runtime.TagsMax {
		return nil, fmt.Errorf("%d tags: Fila takes at most %d", len(tags), runtime.TagsMax)
	}
	for _, t := range tags {
		n := utf8.RuneCountInString(t)
		if n < 1 || n > runtime.TagMaxLen || strings.ContainsFunc(t, unicode.IsControl) {
			return nil, fmt.Errorf("tag %q: Fila takes 1 to %d characters, no control characters", t, runtime.TagMaxLen)
		}
	}
	joined := strings.Join(tags, "\x1f")
	return &joined, nil
}

// mapMetadata is River's metadata with the job's River id added.
func mapMetadata(id int64, raw string) (string, error) {
	md := map[string]json.RawMessage{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &md); err != nil || md == nil {
			return "", fmt.Errorf("metadata is not a JSON object")
		}
	}
	md[MetadataKey] = json.RawMessage(fmt.Sprint(id))
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	if len(b) > runtime.MetadataMaxBytes {
		return "", fmt.Errorf("metadata: %d bytes of JSON with %s, Fila takes at most %d", len(b), MetadataKey, runtime.MetadataMaxBytes)
	}
	return string(b), nil
}
