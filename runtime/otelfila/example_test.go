package otelfila_test

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/otelfila"
)

// The inserting process adds InsertMiddleware to its Client, the working
// process Middleware to its Config: each attempt's span is a child of the
// insert's, in the same trace, through the job's metadata alone.
func Example() {
	ctx := context.Background()
	dsn, drop := exampleDatabase()
	defer drop()
	pool, _ := pgxpool.New(ctx, dsn)
	defer pool.Close()
	_, _ = migrations.Migrate(ctx, pool)

	// Here both ends export to memory; in production, to an OTLP exporter.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	cfg := otelfila.Config{TracerProvider: tp}

	done := make(chan struct{})
	rt, _ := runtime.New(runtime.Config{DSN: dsn,
		Middleware: []runtime.Middleware{otelfila.Middleware(cfg)},
		Kinds: []runtime.Kind{{Name: "thumbnail", Handler: func(ctx context.Context, job *runtime.Job) error {
			defer close(done)
			// An --exec command would get this as TRACEPARENT.
			fmt.Println("command environment:", len(runtime.CommandEnv(ctx)), "variable")
			return nil
		}}}})
	go func() { _ = rt.Run(ctx) }()
	<-rt.Ready()

	client := runtime.NewClient(pool, otelfila.InsertMiddleware(cfg))
	_, _ = client.Insert(ctx, thumbnail{Image: "cat.png"}, nil)
	<-done
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rt.Stop(stopCtx)

	got := spans.GetSpans()
	insert, attempt := got[0], got[1]
	fmt.Println(insert.Name, "→", attempt.Name)
	fmt.Println("same trace:", attempt.SpanContext.TraceID() == insert.SpanContext.TraceID())
	fmt.Println("child of the insert:", attempt.Parent.SpanID() == insert.SpanContext.SpanID())
	// Output:
	// command environment: 1 variable
	// insert thumbnail → attempt thumbnail
	// same trace: true
	// child of the insert: true
}

type thumbnail struct {
	Image string `json:"image"`
}

func (thumbnail) Kind() string { return "thumbnail" }

// exampleDatabase creates a throwaway database and returns what drops it.
func exampleDatabase() (string, func()) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		panic(err)
	}
	name := fmt.Sprintf("fila_example_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		panic(err)
	}
	u, _ := url.Parse(testdb.AdminURL())
	u.Path = "/" + name
	return u.String(), func() {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		conn.Close(ctx)
	}
}
