package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// The periodic job of ExamplePeriodicJob, shown in
// docs/scheduling-and-flow-control.md.

type PruneSessions struct {
	Before time.Time `json:"before"` // sessions that expired before it go
}

func (PruneSessions) Kind() string { return "prune-sessions" }

func pruneEveryHour() runtime.RecurringTask {
	prune := runtime.PeriodicJob("prune-sessions", "@every 1h", func(slot time.Time) (PruneSessions, *runtime.InsertOpts) {
		// Built when the slot is due, by the one worker that enqueues it.
		return PruneSessions{Before: slot.Add(-24 * time.Hour)}, &runtime.InsertOpts{Tags: []string{"maintenance"}}
	})
	prune.RunOnStart = true // enqueue the current slot at start, unless it has its job
	prune.Priority = 5
	return prune
}

func newWorker(dsn string, middleware []runtime.InsertMiddleware, prune func(context.Context, *runtime.Job, PruneSessions) error) (*runtime.Runtime, error) {
	return runtime.New(runtime.Config{
		DSN:              dsn,
		Kinds:            []runtime.Kind{runtime.Work(prune)},
		Recurring:        []runtime.RecurringTask{pruneEveryHour()},
		InsertMiddleware: middleware, // your Client's, as in runtime.NewClient(pool, middleware...)
	})
}

// A periodic job built from typed args at each slot, enqueued at start too
// (RunOnStart), through the insert middleware.
func ExamplePeriodicJob() {
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

	origin := func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			for _, j := range jobs {
				j.Metadata = map[string]any{"origin": "scheduler"} // copy the map to add to one
			}
			return next(ctx, jobs)
		}
	}
	done := make(chan struct{})
	var once sync.Once
	rt, err := newWorker(dsn, []runtime.InsertMiddleware{origin}, func(ctx context.Context, job *runtime.Job, args PruneSessions) error {
		// ... DELETE FROM sessions WHERE expires_at < args.Before ...
		once.Do(func() {
			fmt.Println("prune", job.Tags, "priority", job.Priority, string(job.Metadata))
			close(done)
		})
		return nil
	})
	if err != nil {
		panic(err)
	}
	go func() { _ = rt.Run(ctx) }()
	<-done

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = rt.Stop(stopCtx)
	// Output: prune [maintenance] priority 5 {"origin": "scheduler"}
}
