package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// SendReceipt is a typed job: its Go type names its kind, so the inserter
// and the worker cannot spell it two ways.
type SendReceipt struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

func (SendReceipt) Kind() string { return "send-receipt" }

// InsertOpts declares the kind's defaults once, on the type; an insert's
// own options override them field by field.
func (r SendReceipt) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{
		Queue:       "mail",
		Priority:    2,
		MaxAttempts: 10,
		UniqueKey:   fmt.Sprintf("receipt-%d", r.OrderID), // one receipt per order while pending or running
		Timeout:     30 * time.Second,
		Retry:       &runtime.RetryPolicy{Base: 5 * time.Second, Max: 10 * time.Minute},
	}
}

// A handler registered for a type receives the payload decoded; inserts
// take the value.
func ExampleWork() {
	ctx := context.Background()
	pool, dsn := examplePool()
	defer pool.Close()

	done := make(chan struct{})
	receipts := runtime.Work(func(ctx context.Context, job *runtime.Job, r SendReceipt) error {
		fmt.Printf("receipt of order %d to %s (kind %s, queue %s)\n", r.OrderID, r.Email, job.Kind, job.Queue)
		close(done)
		return nil
	})
	stop := exampleRun(runtime.Config{DSN: dsn, Queues: []string{"mail"}, Kinds: []runtime.Kind{receipts}})
	defer stop()

	client := runtime.NewClient(pool)
	tx, _ := pool.Begin(ctx)
	// ... INSERT the order in tx ...
	if _, err := client.InsertTx(ctx, tx, SendReceipt{OrderID: 42, Email: "ana@example.com"}, nil); err != nil {
		panic(err)
	}
	_ = tx.Commit(ctx)
	<-done
	// Output: receipt of order 42 to ana@example.com (kind send-receipt, queue mail)
}

// The type's defaults hold unless the insert says otherwise.
func ExampleJobArgsWithInsertOpts() {
	ctx := context.Background()
	pool, _ := examplePool()
	defer pool.Close()
	client := runtime.NewClient(pool)

	def, _ := client.Insert(ctx, SendReceipt{OrderID: 1}, nil)
	dup, _ := client.Insert(ctx, SendReceipt{OrderID: 1}, nil)
	over, _ := client.Insert(ctx, SendReceipt{OrderID: 2}, &runtime.InsertOpts{Queue: "urgent", Priority: -1, Timeout: 5 * time.Second})
	for _, id := range []int64{def.ID, over.ID} {
		j, _ := runtime.GetJob(ctx, pool, id)
		fmt.Printf("queue %s, priority %d, max attempts %d, policy %s\n", j.Queue, j.Priority, j.MaxAttempts, j.Policy)
	}
	fmt.Println("second insert of order 1 is a duplicate:", dup.Duplicate)
	// Output:
	// queue mail, priority 2, max attempts 10, policy {"timeout_ms": 30000, "retry_max_ms": 600000, "retry_base_ms": 5000}
	// queue urgent, priority -1, max attempts 10, policy {"timeout_ms": 5000, "retry_max_ms": 600000, "retry_base_ms": 5000}
	// second insert of order 1 is a duplicate: true
}

// A handler waiting for something outside the job snoozes: the job runs
// again later without spending an attempt.
func ExampleSnooze() {
	ctx := context.Background()
	pool, dsn := examplePool()
	defer pool.Close()
	done := make(chan struct{})
	var ready atomic.Bool
	stop := exampleRun(runtime.Config{DSN: dsn, Kinds: []runtime.Kind{{Name: "publish", Handler: func(ctx context.Context, job *runtime.Job) error {
		if !ready.Swap(true) {
			fmt.Println("attempt", job.Attempt, "of", job.MaxAttempts, "snoozes")
			return runtime.Snooze(100 * time.Millisecond)
		}
		fmt.Println("attempt", job.Attempt, "of", job.MaxAttempts, "runs")
		close(done)
		return nil
	}}}})
	defer stop()
	_, _ = runtime.Insert(ctx, pool, "publish", nil, &runtime.InsertOpts{MaxAttempts: 1})
	<-done
	// Output:
	// attempt 1 of 1 snoozes
	// attempt 1 of 1 runs
}

// A failure whose retry time the handler knows (an upstream's Retry-After)
// is retried then, not after the backoff; it counts as an attempt.
func ExampleRetryAfter() {
	ctx := context.Background()
	pool, dsn := examplePool()
	defer pool.Close()
	done := make(chan struct{})
	stop := exampleRun(runtime.Config{DSN: dsn, Kinds: []runtime.Kind{{Name: "fetch", Handler: func(ctx context.Context, job *runtime.Job) error {
		if job.Attempt == 1 {
			fmt.Println("attempt 1: 429, retry after 100ms")
			return runtime.RetryAfter(errors.New("429 Too Many Requests"), 100*time.Millisecond)
		}
		fmt.Println("attempt", job.Attempt, "succeeds")
		close(done)
		return nil
	}}}})
	defer stop()
	_, _ = runtime.Insert(ctx, pool, "fetch", nil, nil)
	<-done
	// Output:
	// attempt 1: 429, retry after 100ms
	// attempt 2 succeeds
}

// Middleware wraps every handler, the first outermost, and sees each
// attempt's outcome.
func ExampleMiddleware() {
	ctx := context.Background()
	pool, dsn := examplePool()
	defer pool.Close()
	done := make(chan struct{})
	logging := func(next runtime.Handler) runtime.Handler {
		return func(ctx context.Context, job *runtime.Job) error {
			fmt.Println("start", job.Kind, "attempt", job.Attempt)
			err := next(ctx, job)
			fmt.Println("end", job.Kind, runtime.OutcomeOf(ctx, job, err))
			return err
		}
	}
	stop := exampleRun(runtime.Config{DSN: dsn, Middleware: []runtime.Middleware{logging},
		Kinds: []runtime.Kind{{Name: "resize", Handler: func(ctx context.Context, job *runtime.Job) error {
			defer func() {
				if job.Attempt == 2 {
					close(done)
				}
			}()
			if job.Attempt == 1 {
				return errors.New("out of memory")
			}
			return nil
		}, Backoff: func(int) time.Duration { return 10 * time.Millisecond }}}})
	defer stop()
	_, _ = runtime.Insert(ctx, pool, "resize", nil, nil)
	<-done
	stop()
	// Output:
	// start resize attempt 1
	// end resize retried
	// start resize attempt 2
	// end resize completed
}

// Insert middleware sees every job a Client inserts, and may add to its
// metadata: who enqueued it, a trace context.
func ExampleInsertMiddleware() {
	ctx := context.Background()
	pool, _ := examplePool()
	defer pool.Close()
	stamp := func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			for _, j := range jobs {
				md := map[string]any{"enqueued_by": "checkout"}
				for k, v := range j.Metadata { // a copy: the map may be the caller's
					md[k] = v
				}
				j.Metadata = md
			}
			return next(ctx, jobs)
		}
	}
	client := runtime.NewClient(pool, stamp)
	res, _ := client.Insert(ctx, SendReceipt{OrderID: 7}, &runtime.InsertOpts{Timeout: time.Second})
	j, _ := runtime.GetJob(ctx, pool, res.ID)
	fmt.Println(string(j.Metadata))
	fmt.Println(string(j.Policy))
	// Output:
	// {"enqueued_by": "checkout"}
	// {"timeout_ms": 1000, "retry_max_ms": 600000, "retry_base_ms": 5000}
}

// Tags and metadata find jobs (by index); a handler's output is kept with
// its completion and read back from Go.
func ExampleJob_SetOutput() {
	ctx := context.Background()
	pool, dsn := examplePool()
	defer pool.Close()
	done := make(chan struct{})
	stop := exampleRun(runtime.Config{DSN: dsn, Kinds: []runtime.Kind{{Name: "import", Handler: func(ctx context.Context, job *runtime.Job) error {
		return job.SetOutput(map[string]int{"rows": 1200}) // at most runtime.OutputMax bytes of JSON
	}}}, Observer: finished(done)})
	defer stop()
	id, _ := runtime.Insert(ctx, pool, "import", nil, &runtime.InsertOpts{Tags: []string{"nightly"}, Metadata: map[string]any{"tenant": "acme"}})
	<-done

	found, _ := runtime.ListJobs(ctx, pool, runtime.JobFilter{Tag: "nightly", Metadata: map[string]any{"tenant": "acme"}})
	j, _ := runtime.GetJob(ctx, pool, id)
	fmt.Println(len(found), "job tagged nightly for acme:", j.State, string(j.Output))
	// Output: 1 job tagged nightly for acme: completed {"rows": 1200}
}

// finished is an Observer that closes done at the first attempt written.
type finished chan struct{}

func (finished) Woken(string, runtime.WakeReason)    {}
func (finished) Claimed(string, []*runtime.Job, int) {}
func (f finished) Finished(*runtime.Job, runtime.Outcome, time.Duration) {
	select {
	case <-f:
	default:
		close(f)
	}
}

// examplePool opens a pool on a migrated throwaway database.
func examplePool() (*pgxpool.Pool, string) {
	dsn := exampleDatabase()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Migrate(context.Background(), pool); err != nil {
		panic(err)
	}
	return pool, dsn
}

// exampleRun runs a runtime until the returned stop is called (stop may be
// called more than once).
func exampleRun(cfg runtime.Config) (stop func()) {
	rt, err := runtime.New(cfg)
	if err != nil {
		panic(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	<-rt.Ready()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
		<-errc
	}
}
