package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
)

// JobArgs is the payload of a typed job: its Go type names its kind, so
// the inserter and the worker cannot spell the kind two ways. Kind must not
// depend on the value (declare it on the value type, not a pointer):
//
//	type SendWelcome struct{ Email string }
//
//	func (SendWelcome) Kind() string { return "send-welcome" }
type JobArgs interface {
	Kind() string
}

// JobArgsWithInsertOpts is JobArgs that declares its kind's insert
// defaults (queue, priority, max attempts, uniqueness) once, on the type;
// the InsertOpts given to InsertArgs override them field by field.
type JobArgsWithInsertOpts interface {
	JobArgs
	InsertOpts() InsertOpts
}

// Work returns the Kind that runs handler for the jobs of T's kind, with
// each payload decoded into a new T. A payload that does not decode into T
// is dead at once (a Permanent error naming the kind and the type): no
// retry can fix it. Set the returned Kind's Timeout, Limit or Backoff for
// the kind's worker policy. The decoding is encoding/json's; the dispatch
// itself is a plain function call.
func Work[T JobArgs](handler func(ctx context.Context, job *Job, args T) error) Kind {
	var zero T
	kind := zero.Kind()
	typ := reflect.TypeFor[T]().String()
	return Kind{Name: kind, Handler: func(ctx context.Context, job *Job) error {
		var args T
		if err := job.decodeInto(&args, typ); err != nil {
			return err
		}
		return handler(ctx, job, args)
	}}
}

// decodeInto decodes the payload into v, a *T of typed job args.
func (j *Job) decodeInto(v any, typ string) error {
	if err := j.Decode(v); err != nil {
		return Permanent(fmt.Errorf("kind %q: payload of job %d does not decode into %s: %w", j.Kind, j.ID, typ, err))
	}
	return nil
}

// InsertArgs enqueues one typed job: its kind is args' Kind, its payload
// args as JSON, its options those args declares (JobArgsWithInsertOpts)
// overridden by the set fields of opts. db may be a pool or the caller's
// transaction (then the job exists only if that transaction commits).
func InsertArgs(ctx context.Context, db DB, args JobArgs, opts *InsertOpts) (Inserted, error) {
	p, err := argsParams(args, opts)
	if err != nil {
		return Inserted{}, err
	}
	return InsertJob(ctx, db, p.Kind, p.Payload, &p.InsertOpts)
}

// InsertArgsTx is InsertArgs inside the caller's transaction, in the same
// commit as the business data the job belongs to.
func InsertArgsTx(ctx context.Context, tx DB, args JobArgs, opts *InsertOpts) (Inserted, error) {
	return InsertArgs(ctx, tx, args, opts)
}

// ArgsParams is one typed job of InsertManyArgs.
type ArgsParams struct {
	Args JobArgs
	// Opts, if set, override what Args declares, field by field.
	Opts *InsertOpts
}

// InsertManyArgs enqueues many typed jobs as InsertMany does (one statement,
// or COPY for large batches; all or nothing) and returns their ids in order.
func InsertManyArgs(ctx context.Context, db DB, jobs []ArgsParams) ([]int64, error) {
	params := make([]InsertParams, len(jobs))
	for i, j := range jobs {
		p, err := argsParams(j.Args, j.Opts)
		if err != nil {
			return nil, fmt.Errorf("insert many: job %d: %w", i, err)
		}
		params[i] = p
	}
	return InsertMany(ctx, db, params)
}

// argsParams is the InsertParams of one typed job.
func argsParams(args JobArgs, opts *InsertOpts) (InsertParams, error) {
	if args == nil || (reflect.ValueOf(args).Kind() == reflect.Pointer && reflect.ValueOf(args).IsNil()) {
		return InsertParams{}, fmt.Errorf("insert: nil job args")
	}
	p := InsertParams{Kind: args.Kind()}
	b, err := json.Marshal(args)
	if err != nil {
		return InsertParams{}, fmt.Errorf("insert job of kind %q: payload: %w", p.Kind, err)
	}
	p.Payload = json.RawMessage(b)
	if d, ok := args.(JobArgsWithInsertOpts); ok {
		p.InsertOpts = d.InsertOpts()
	}
	if opts != nil {
		p.InsertOpts = p.InsertOpts.overriddenBy(*opts)
	}
	return p, nil
}

// overriddenBy returns o with every field that over sets replaced by over's.
func (o InsertOpts) overriddenBy(over InsertOpts) InsertOpts {
	if over.Queue != "" {
		o.Queue = over.Queue
	}
	if over.Priority != 0 {
		o.Priority = over.Priority
	}
	if !over.RunAt.IsZero() {
		o.RunAt = over.RunAt
	}
	if over.MaxAttempts != 0 {
		o.MaxAttempts = over.MaxAttempts
	}
	if over.UniqueKey != "" {
		o.UniqueKey = over.UniqueKey
	}
	if over.UniqueStates != nil {
		o.UniqueStates = over.UniqueStates
	}
	if over.Tags != nil {
		o.Tags = over.Tags
	}
	if over.Metadata != nil {
		// Merged: the insert's keys over the type's.
		merged := make(map[string]any, len(o.Metadata)+len(over.Metadata))
		maps.Copy(merged, o.Metadata)
		maps.Copy(merged, over.Metadata)
		o.Metadata = merged
	}
	if over.Timeout != 0 {
		o.Timeout = over.Timeout
	}
	if over.Retry != nil {
		o.Retry = over.Retry
	}
	if over.After != nil {
		o.After = over.After
	}
	if over.OnDependencyFailure != "" {
		o.OnDependencyFailure = over.OnDependencyFailure
	}
	if over.Sequence != "" {
		o.Sequence = over.Sequence
	}
	if over.SequenceOnDead != "" {
		o.SequenceOnDead = over.SequenceOnDead
	}
	if over.Batch != 0 {
		o.Batch = over.Batch
	}
	if over.Held {
		o.Held = true
	}
	if over.PayloadLimits.MaxBytes != 0 {
		o.PayloadLimits.MaxBytes = over.PayloadLimits.MaxBytes
	}
	if over.PayloadLimits.MaxDepth != 0 {
		o.PayloadLimits.MaxDepth = over.PayloadLimits.MaxDepth
	}
	return o
}
