package otelfila_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/otelfila"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type charge struct {
	Cents int `json:"cents"`
}

func (charge) Kind() string { return "charge" }

func (charge) InsertOpts() runtime.InsertOpts { return runtime.InsertOpts{Queue: "billing"} }

// tracer is one process's tracing: its own provider and in-memory exporter.
func tracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// The inserter and the worker trace with providers of their own, as two
// processes would: the only thing between them is the job's row. Each
// attempt's span is a child of the insert's span, in its trace, with the
// job's kind, queue, attempt, pickup wait and outcome; the handler's
// context carries it, and so does the TRACEPARENT its commands get.
func TestAttemptSpansJoinTheInsertTrace(t *testing.T) {
	t.Parallel()
	db := testrt.Migrated(t)
	ctx := context.Background()
	insertTP, inserted := tracer(t)
	workTP, worked := tracer(t)

	var mu sync.Mutex
	var handlerSpans []trace.SpanContext
	var envs [][]string
	snoozed := map[int64]bool{}
	cfg := runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Queues: []string{"billing"},
		RetryBase: 10 * time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: zaptest.NewLogger(t),
		Middleware: []runtime.Middleware{otelfila.Middleware(otelfila.Config{TracerProvider: workTP})},
		Kinds: []runtime.Kind{runtime.Work(func(ctx context.Context, j *runtime.Job, c charge) error {
			mu.Lock()
			handlerSpans = append(handlerSpans, trace.SpanContextFromContext(ctx))
			envs = append(envs, runtime.CommandEnv(ctx))
			again := snoozed[j.ID]
			snoozed[j.ID] = true
			mu.Unlock()
			switch {
			case c.Cents < 0:
				return runtime.Permanent(errors.New("negative amount"))
			case c.Cents == 0 && !again:
				return runtime.Snooze(0)
			case c.Cents == 0:
				return nil
			case j.Attempt == 1:
				return errors.New("gateway timeout")
			}
			return nil
		})}}
	testrt.Start(t, cfg)

	client := runtime.NewClient(db.Pool, otelfila.InsertMiddleware(otelfila.Config{TracerProvider: insertTP}))
	pctx, parent := insertTP.Tracer("test").Start(ctx, "signup")
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := client.InsertTx(pctx, tx, charge{Cents: 500}, &runtime.InsertOpts{Metadata: map[string]any{"tenant": "acme"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	parent.End()
	dead, err := client.Insert(ctx, charge{Cents: -1}, nil)
	require.NoError(t, err)
	many, err := client.InsertMany(ctx, []runtime.ArgsParams{{Args: charge{Cents: 0}}, {Args: charge{Cents: 0}}})
	require.NoError(t, err)

	testrt.WaitFor(t, 15*time.Second, "every attempt's span ended", func() bool { return len(worked.GetSpans()) == 2+1+4 })

	ins := inserted.GetSpans()
	require.Len(t, ins, 4, "three inserts and their parent")
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range ins {
		byName[s.Name] = append(byName[s.Name], s)
	}
	insertSpan := byName["insert charge"][0]
	require.Equal(t, trace.SpanKindProducer, insertSpan.SpanKind)
	require.Equal(t, parent.SpanContext().SpanID(), insertSpan.Parent.SpanID(), "the insert is a child of the caller's span")
	require.Equal(t, "charge", attr(insertSpan, "fila.kind").AsString())
	require.Equal(t, "billing", attr(insertSpan, "fila.queue").AsString())
	require.Equal(t, res.ID, attr(insertSpan, "fila.job_id").AsInt64())
	require.EqualValues(t, 2, attr(byName["insert charge"][2], "fila.jobs").AsInt64())

	// The trace context is in the job's metadata, beside the caller's.
	j, err := runtime.GetJob(ctx, db.Pool, res.ID)
	require.NoError(t, err)
	require.Contains(t, string(j.Metadata), `"tenant": "acme"`)
	require.Contains(t, string(j.Metadata), fmt.Sprintf(`"traceparent": "00-%s-%s-01"`, insertSpan.SpanContext.TraceID(), insertSpan.SpanContext.SpanID()))

	attempts := map[int64][]tracetest.SpanStub{}
	for _, s := range worked.GetSpans() {
		attempts[attr(s, "fila.job_id").AsInt64()] = append(attempts[attr(s, "fila.job_id").AsInt64()], s)
	}
	ofJob := attempts[res.ID]
	require.Len(t, ofJob, 2)
	slices.SortFunc(ofJob, func(a, b tracetest.SpanStub) int {
		return int(attr(a, "fila.attempt").AsInt64() - attr(b, "fila.attempt").AsInt64())
	})
	for i, s := range ofJob {
		require.Equal(t, "attempt charge", s.Name)
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		require.Equal(t, insertSpan.SpanContext.TraceID(), s.SpanContext.TraceID(), "the attempt joins the insert's trace")
		require.Equal(t, insertSpan.SpanContext.SpanID(), s.Parent.SpanID(), "a child of the insert's span")
		require.True(t, s.Parent.IsRemote())
		require.Equal(t, "charge", attr(s, "fila.kind").AsString())
		require.Equal(t, "billing", attr(s, "fila.queue").AsString())
		require.EqualValues(t, i+1, attr(s, "fila.attempt").AsInt64())
		require.EqualValues(t, 5, attr(s, "fila.max_attempts").AsInt64())
		require.Equal(t, attribute.FLOAT64, attr(s, "fila.wait_ms").Type())
		require.GreaterOrEqual(t, attr(s, "fila.wait_ms").AsFloat64(), 0.0)
	}
	require.Equal(t, "retried", attr(ofJob[0], "fila.outcome").AsString())
	require.Equal(t, codes.Error, ofJob[0].Status.Code)
	require.Equal(t, "gateway timeout", ofJob[0].Status.Description)
	require.Equal(t, "completed", attr(ofJob[1], "fila.outcome").AsString())
	require.Equal(t, codes.Unset, ofJob[1].Status.Code)

	require.Len(t, attempts[dead.ID], 1)
	require.Equal(t, "dead", attr(attempts[dead.ID][0], "fila.outcome").AsString())
	for _, m := range many {
		outcomes := []string{}
		for _, s := range attempts[m.ID] {
			outcomes = append(outcomes, attr(s, "fila.outcome").AsString())
			require.Equal(t, byName["insert charge"][2].SpanContext.SpanID(), s.Parent.SpanID(), "jobs of one InsertMany share its span")
		}
		require.ElementsMatch(t, []string{"snoozed", "completed"}, outcomes)
	}

	// The handler runs inside the attempt's span, and its commands would
	// get it as TRACEPARENT.
	mu.Lock()
	defer mu.Unlock()
	spanIDs := map[trace.SpanID]bool{}
	for _, s := range worked.GetSpans() {
		spanIDs[s.SpanContext.SpanID()] = true
	}
	for i, sc := range handlerSpans {
		require.True(t, spanIDs[sc.SpanID()], "the handler's context carries its attempt's span")
		require.Equal(t, []string{fmt.Sprintf("TRACEPARENT=00-%s-%s-01", sc.TraceID(), sc.SpanID())}, envs[i])
	}
	// The jobs' handlers start in any order (one claim takes them all):
	// one of them runs in the insert's trace.
	inTrace := false
	for _, env := range envs {
		inTrace = inTrace || strings.HasPrefix(env[0], "TRACEPARENT=00-"+insertSpan.SpanContext.TraceID().String())
	}
	require.True(t, inTrace, "a handler's TRACEPARENT is in the insert's trace: %v", envs)
}

// A job inserted without a trace context (plain SQL, or a client without
// the middleware) gets an attempt span of a trace of its own.
func TestAttemptWithoutTraceContextStartsATrace(t *testing.T) {
	t.Parallel()
	db := testrt.Migrated(t)
	ctx := context.Background()
	tp, exp := tracer(t)
	cfg := runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Logger: zaptest.NewLogger(t),
		Middleware: []runtime.Middleware{otelfila.Middleware(otelfila.Config{TracerProvider: tp})},
		Kinds:      []runtime.Kind{{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}}}
	testrt.Start(t, cfg)
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, metadata) VALUES ('k', '{"traceparent": "not one"}'), ('k', NULL)`)
	require.NoError(t, err)
	testrt.WaitFor(t, 15*time.Second, "two spans", func() bool { return len(exp.GetSpans()) == 2 })
	for _, s := range exp.GetSpans() {
		require.False(t, s.Parent.IsValid(), "no parent")
		require.Equal(t, "completed", attr(s, "fila.outcome").AsString())
	}
}

// A handler that panics fails its attempt like any other error: the span
// ends with status Error, the panic recorded with its stack, and the
// attempt's outcome.
func TestPanickingHandlerEndsItsSpanAsAnError(t *testing.T) {
	t.Parallel()
	db := testrt.Migrated(t)
	ctx := context.Background()
	tp, exp := tracer(t)
	cfg := runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Logger: zaptest.NewLogger(t),
		Middleware: []runtime.Middleware{otelfila.Middleware(otelfila.Config{TracerProvider: tp})},
		Kinds:      []runtime.Kind{{Name: "boom", Handler: func(context.Context, *runtime.Job) error { panic("kaboom") }}}}
	testrt.Start(t, cfg)
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ('boom', 1)`)
	require.NoError(t, err)
	testrt.WaitFor(t, 15*time.Second, "the attempt's span", func() bool { return len(exp.GetSpans()) == 1 })
	s := exp.GetSpans()[0]
	require.Equal(t, codes.Error, s.Status.Code)
	require.Contains(t, s.Status.Description, "handler panicked: kaboom")
	require.Equal(t, string(runtime.OutcomeDead), attr(s, "fila.outcome").AsString())
	require.NotEmpty(t, s.Events, "the error is recorded")
	require.Contains(t, s.Events[0].Name, "exception")
}
