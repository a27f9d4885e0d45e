// Package otelfila traces Fila jobs with OpenTelemetry: a span for each
// insert and for each attempt, the attempt's span in the same trace as the
// insert that enqueued the job, across processes.
//
// It is built on nothing but Fila's middleware: InsertMiddleware for a
// runtime.Client, Middleware for a runtime.Config (which wraps `fila work
// --exec` commands too). The insert's span context travels in the job's
// metadata under MetadataTraceParent and MetadataTraceState (W3C Trace
// Context), so an attempt run by any worker, or a plain SQL insert that
// writes those keys, joins the trace. The attempt's span context is given to
// the commands a handler starts as TRACEPARENT and TRACESTATE in their
// environment (runtime.WithCommandEnv).
//
// Spans and their attributes:
//
//	insert <kind>  (producer)  fila.kind, fila.queue, fila.jobs, fila.job_id (one job), fila.duplicate
//	attempt <kind> (consumer)  fila.kind, fila.queue, fila.job_id, fila.attempt, fila.max_attempts,
//	                           fila.wait_ms (pickup wait), fila.outcome (runtime.Outcome)
//
// An insert of jobs of several kinds is one span named "insert" with fila.kind
// unset. A failed attempt's span has status Error and the error recorded.
package otelfila

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fila-run/fila/runtime"
)

// The metadata keys of a job's trace context: the W3C traceparent and
// tracestate of the span that inserted it.
const (
	MetadataTraceParent = "traceparent"
	MetadataTraceState  = "tracestate"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/fila-run/fila/runtime/otelfila"

// Config says where spans go. The zero value uses OpenTelemetry's globals.
type Config struct {
	// TracerProvider makes the tracer. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

func (c Config) tracer() trace.Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// propagator writes and reads the trace context of a job: W3C Trace
// Context, the format of TRACEPARENT, whatever the global propagator is.
var propagator = propagation.TraceContext{}

// InsertMiddleware gives each insert of a runtime.Client a span, and each
// job it inserts the span's context in its metadata.
func InsertMiddleware(cfg Config) runtime.InsertMiddleware {
	tracer := cfg.tracer()
	return func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			kind, queue := jobs[0].Kind, queueOf(jobs[0].Queue)
			for _, j := range jobs[1:] {
				if j.Kind != kind {
					kind = ""
				}
				if queueOf(j.Queue) != queue {
					queue = ""
				}
			}
			name := "insert"
			attrs := []attribute.KeyValue{attribute.Int("fila.jobs", len(jobs))}
			if kind != "" {
				name += " " + kind
				attrs = append(attrs, attribute.String("fila.kind", kind))
			}
			if queue != "" {
				attrs = append(attrs, attribute.String("fila.queue", queue))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			carrier := propagation.MapCarrier{}
			propagator.Inject(ctx, carrier)
			if tp := carrier[MetadataTraceParent]; tp != "" {
				for _, j := range jobs {
					// A new map: the job's may be its type's or the caller's.
					md := make(map[string]any, len(j.Metadata)+2)
					maps.Copy(md, j.Metadata)
					md[MetadataTraceParent] = tp
					if ts := carrier[MetadataTraceState]; ts != "" {
						md[MetadataTraceState] = ts
					}
					j.Metadata = md
				}
			}
			res, err := next(ctx, jobs)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return res, err
			}
			if len(res) == 1 {
				span.SetAttributes(attribute.Int64("fila.job_id", res[0].ID), attribute.Bool("fila.duplicate", res[0].Duplicate))
			}
			return res, nil
		}
	}
}

func queueOf(q string) string {
	if q == "" {
		return "default"
	}
	return q
}

// Middleware gives each attempt a span, child of the span that inserted
// the job when its metadata carries one, with the attempt's outcome; the
// handler's context carries it, and the commands it starts get it as
// TRACEPARENT (and TRACESTATE).
func Middleware(cfg Config) runtime.Middleware {
	tracer := cfg.tracer()
	return func(next runtime.Handler) runtime.Handler {
		return func(ctx context.Context, job *runtime.Job) error {
			parent := ctx
			if c, ok := jobCarrier(job); ok {
				parent = propagator.Extract(ctx, c)
			}
			sctx, span := tracer.Start(parent, "attempt "+job.Kind, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					attribute.String("fila.kind", job.Kind),
					attribute.String("fila.queue", job.Queue),
					attribute.Int64("fila.job_id", job.ID),
					attribute.Int("fila.attempt", job.Attempt),
					attribute.Int("fila.max_attempts", job.MaxAttempts),
					attribute.Float64("fila.wait_ms", float64(job.Wait.Microseconds())/1000),
				))
			defer span.End()
			env := propagation.MapCarrier{}
			propagator.Inject(sctx, env)
			if tp := env[MetadataTraceParent]; tp != "" {
				vars := []string{"TRACEPARENT=" + tp}
				if ts := env[MetadataTraceState]; ts != "" {
					vars = append(vars, "TRACESTATE="+ts)
				}
				sctx = runtime.WithCommandEnv(sctx, vars...)
			}
			err := next(sctx, job)
			outcome := runtime.OutcomeOf(ctx, job, err)
			span.SetAttributes(attribute.String("fila.outcome", string(outcome)))
			if err != nil && outcome != runtime.OutcomeSnoozed {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

var traceParentJSON = []byte(`"` + MetadataTraceParent + `"`)

// jobCarrier reads the trace context from a job's metadata.
func jobCarrier(job *runtime.Job) (propagation.MapCarrier, bool) {
	if len(job.Metadata) == 0 || !bytes.Contains(job.Metadata, traceParentJSON) {
		return nil, false
	}
	var m struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	if err := json.Unmarshal(job.Metadata, &m); err != nil || m.TraceParent == "" {
		return nil, false
	}
	c := propagation.MapCarrier{MetadataTraceParent: m.TraceParent}
	if m.TraceState != "" {
		c[MetadataTraceState] = m.TraceState
	}
	return c, true
}
