package runtime_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// Start a runtime, enqueue a job in the same transaction as the business
// data, and stop gracefully.
func Example() {
	ctx := context.Background()
	dsn := exampleDatabase() // a DSN for a database of your own
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		panic(err)
	}

	done := make(chan struct{})
	rt, err := runtime.New(runtime.Config{
		DSN: dsn, // may point at PgBouncer; set ListenDSN to PostgreSQL directly then
		Kinds: []runtime.Kind{{
			Name: "send-welcome",
			Handler: func(ctx context.Context, job *runtime.Job) error {
				var p struct{ Email string }
				if err := job.Decode(&p); err != nil {
					return err // a payload that does not decode is permanent: dead at once
				}
				fmt.Println("welcome", p.Email, "key", job.IdempotencyKey() != "")
				close(done)
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = rt.Run(ctx) }()
	<-rt.Ready()

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	// ... INSERT the user in tx ...
	if _, err := runtime.InsertTx(ctx, tx, "send-welcome", map[string]string{"Email": "ana@example.com"}, nil); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil { // the job exists only if this commits
		panic(err)
	}
	<-done

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rt.Stop(stopCtx) // finish running jobs, then return
	// Output: welcome ana@example.com key true
}

// exampleDatabase creates a throwaway database for the example; TestMain
// drops it.
func exampleDatabase() string {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("fila_example_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		panic(err)
	}
	exampleDatabases = append(exampleDatabases, name)
	u, err := url.Parse(testdb.AdminURL())
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

var exampleDatabases []string

func dropExampleDatabases() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, "drop example databases:", err)
		return
	}
	defer conn.Close(ctx)
	for _, name := range exampleDatabases {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "drop example database:", err)
		}
	}
}
