package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/otelfila"
)

type otelPing struct {
	N int `json:"n"`
}

func (otelPing) Kind() string { return "ping" }

// consoleSpan is a span as the console exporter writes it.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// A job inserted here, traced by this process, is run by a `fila work
// --otel` process: its attempt's span, exported by that process, is a
// child of this process's insert span, and the --exec command's
// TRACEPARENT names that attempt's span, in the same trace.
func TestOtelTraceJoinsAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	dir := t.TempDir()
	cmd := filaCmd(db, "work", "--log-format", "json", "--otel",
		"--exec", fmt.Sprintf(`ping=printf %%s "$TRACEPARENT" > %s/$FILA_JOB_ID.tmp && mv %s/$FILA_JOB_ID.tmp %s/$FILA_JOB_ID`, dir, dir, dir))
	cmd.Env = append(cmd.Env, "OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=fila-test-worker")
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
	waitFor(t, 60*time.Second, "the worker registered ping", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_kinds WHERE kind = 'ping'`).Scan(&n)
		return n == 1
	})

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(ctx)
	client := runtime.NewClient(db.Pool, otelfila.InsertMiddleware(otelfila.Config{TracerProvider: tp}))
	res, err := client.Insert(ctx, otelPing{N: 1}, nil)
	require.NoError(t, err)
	insertSpan := exp.GetSpans()[0]
	traceID, insertID := insertSpan.SpanContext.TraceID().String(), insertSpan.SpanContext.SpanID().String()

	file := filepath.Join(dir, fmt.Sprint(res.ID))
	waitFor(t, 30*time.Second, "the command ran", func() bool { _, err := os.Stat(file); return err == nil })
	tp1, err := os.ReadFile(file)
	require.NoError(t, err)
	parts := strings.Split(string(tp1), "-")
	require.Len(t, parts, 4, "TRACEPARENT %q", tp1)
	require.Equal(t, traceID, parts[1], "the command's TRACEPARENT is in the insert's trace")

	var attempt *consoleSpan
	waitFor(t, 30*time.Second, "the worker exported the attempt's span", func() bool {
		sc := bufio.NewScanner(strings.NewReader(stdout.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var s consoleSpan
			if json.Unmarshal(sc.Bytes(), &s) == nil && s.Name == "attempt ping" {
				attempt = &s
				return true
			}
		}
		return false
	})
	require.Equal(t, traceID, attempt.SpanContext.TraceID)
	require.Equal(t, insertID, attempt.Parent.SpanID, "the attempt is a child of the insert, made in another process")
	require.Equal(t, attempt.SpanContext.SpanID, parts[2], "the command's TRACEPARENT names the attempt's span")
	attrs := map[string]any{}
	for _, a := range attempt.Attributes {
		attrs[a.Key] = a.Value.Value
	}
	require.Equal(t, "ping", attrs["fila.kind"])
	require.Equal(t, "default", attrs["fila.queue"])
	require.EqualValues(t, 1, attrs["fila.attempt"])
	require.Equal(t, "completed", attrs["fila.outcome"])
	require.Contains(t, attrs, "fila.wait_ms")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
}

// An exporter or protocol fila does not support is refused before the
// worker starts, saying what is.
func TestOtelRefusesUnsupportedExporters(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	for env, want := range map[string]string{
		"OTEL_TRACES_EXPORTER=zipkin":      "OTEL_TRACES_EXPORTER=zipkin is not supported: use otlp, console or none",
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc": "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: fila sends OTLP over http/protobuf only",
	} {
		cmd := filaCmd(db, "work", "--otel")
		cmd.Env = append(cmd.Env, env)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, env)
		require.Contains(t, string(out), want)
	}
}

// `fila enqueue` run under a trace (TRACEPARENT in its environment, as a
// traced --exec command or a CI step has it) stores that trace context
// where otelfila stores a Go insert's, so the job's attempts join the
// trace; --meta traceparent given by hand wins; a malformed TRACEPARENT is
// left out with a warning, and the job is still enqueued.
func TestEnqueueJoinsTheTraceInItsEnvironment(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	const (
		parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		state  = "vendor=abc"
	)
	enqueue := func(env []string, args ...string) (id, stderr string) {
		t.Helper()
		cmd := filaCmd(db, append([]string{"enqueue", "--kind", "traced", "--allow-unknown-kind"}, args...)...)
		cmd.Env = append(cmd.Env, env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		require.NoError(t, cmd.Run(), e.String())
		return strings.TrimSpace(o.String()), e.String()
	}
	metadata := func(id string) map[string]any {
		t.Helper()
		var md map[string]any
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(metadata, '{}') FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&md))
		return md
	}

	id, _ := enqueue([]string{"TRACEPARENT=" + parent, "TRACESTATE=" + state}, "--meta", "team=ops")
	require.Equal(t, map[string]any{otelfila.MetadataTraceParent: parent, otelfila.MetadataTraceState: state, "team": "ops"}, metadata(id))

	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	id, _ = enqueue([]string{"TRACEPARENT=" + parent}, "--meta", otelfila.MetadataTraceParent+"="+own)
	require.Equal(t, map[string]any{otelfila.MetadataTraceParent: own}, metadata(id))

	id, stderr := enqueue([]string{"TRACEPARENT=not-a-trace"})
	require.NotEmpty(t, id)
	require.Empty(t, metadata(id))
	require.Contains(t, stderr, "TRACEPARENT is not a W3C traceparent")
	require.Contains(t, stderr, "not-a-trace")

	id, _ = enqueue(nil)
	require.Empty(t, metadata(id), "no trace context without TRACEPARENT")
}
