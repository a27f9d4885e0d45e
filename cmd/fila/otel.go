package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/otelfila"
)

// tracingShutdownTimeout bounds the flush of the spans left at exit.
const tracingShutdownTimeout = 5 * time.Second

// startTracing sets up the tracing of `fila work --otel` from the standard
// OTEL_* environment: OTEL_TRACES_EXPORTER otlp (the default; OTLP over
// http/protobuf, configured by OTEL_EXPORTER_OTLP_* as the SDK reads them),
// console (one JSON span a line on stdout) or none (no spans are sent, but
// commands still get TRACEPARENT); OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the process, OTEL_TRACES_SAMPLER samples.
// It returns the attempts' middleware and what flushes the spans at exit.
func startTracing(ctx context.Context, stdout io.Writer) (runtime.Middleware, func(*zap.Logger), error) {
	var exporter sdktrace.SpanExporter
	var err error
	switch name := or(os.Getenv("OTEL_TRACES_EXPORTER"), "otlp"); name {
	case "otlp":
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
			if p := os.Getenv(v); p != "" && p != "http/protobuf" {
				return nil, nil, fmt.Errorf("--otel: %s=%s is not supported: fila sends OTLP over http/protobuf only", v, p)
			}
		}
		exporter, err = otlptracehttp.New(ctx)
	case "console":
		exporter, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	case "none":
	default:
		return nil, nil, fmt.Errorf("--otel: OTEL_TRACES_EXPORTER=%s is not supported: use otlp, console or none", name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--otel: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.Environment())
	if err != nil {
		return nil, nil, fmt.Errorf("--otel: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exporter != nil {
		opts = append(opts, sdktrace.WithBatcher(exporter))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	shutdown := func(log *zap.Logger) {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("cannot send the last spans", zap.Error(err))
		}
	}
	return otelfila.Middleware(otelfila.Config{TracerProvider: tp}), shutdown, nil
}
