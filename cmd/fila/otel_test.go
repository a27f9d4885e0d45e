package main

import (
	"bufio"
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
