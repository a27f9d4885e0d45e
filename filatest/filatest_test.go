package filatest_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

type invoice struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

func (invoice) Kind() string { return "invoice" }

func (invoice) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "billing", MaxAttempts: 3}
}

type other struct{}

func (other) Kind() string { return "other" }

// fakeT records a helper's failure; Fatalf ends the goroutine as the
// testing package's does.
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = append(f.failed, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	goruntime.Goexit()
}

// fails runs fn with a fakeT and returns the failure it reported, "" if
// none.
func fails(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	return strings.Join(f.failed, "; ")
}

// RequireInsertedTx finds the job the code under test inserted in the
// test's transaction, with its args, and fails when the job is missing,
// differs from what is required, or was not inserted in that transaction.
func TestRequireInsertedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filatest.NewDB(t)
	tx := db.Tx(t)
	_, err := runtime.InsertArgsTx(ctx, tx, invoice{Customer: "acme", Cents: 100}, nil)
	require.NoError(t, err)
	_, err = runtime.InsertArgsTx(ctx, tx, invoice{Customer: "zeta", Cents: 200}, &runtime.InsertOpts{
		Priority: 2, Tags: []string{"eu"}, Metadata: map[string]any{"tenant": "zeta", "n": 1}})
	require.NoError(t, err)

	newest := filatest.RequireInsertedTx[invoice](ctx, t, tx, nil)
	require.Equal(t, invoice{Customer: "zeta", Cents: 200}, newest.Args)
	require.Equal(t, "billing", newest.Row.Queue, "the type's defaults")
	first := filatest.RequireInsertedTx[invoice](ctx, t, tx, &filatest.RequireOpts{Queue: "billing", MaxAttempts: 3, State: "pending"})
	require.Equal(t, invoice{Customer: "zeta", Cents: 200}, first.Args)
	tagged := filatest.RequireInsertedTx[invoice](ctx, t, tx, &filatest.RequireOpts{Priority: 2, Tags: []string{"eu"}, Metadata: map[string]any{"tenant": "zeta", "n": 1}})
	require.Equal(t, "zeta", tagged.Args.Customer)
	require.Len(t, filatest.InsertedTx[invoice](ctx, t, tx), 2)
	filatest.RequireNotInsertedTx[other](ctx, t, tx)

	msg := fails(t, func(tb testing.TB) { filatest.RequireInsertedTx[other](ctx, tb, tx, nil) })
	require.Contains(t, msg, `no job of kind "other"`)
	msg = fails(t, func(tb testing.TB) {
		filatest.RequireInsertedTx[invoice](ctx, tb, tx, &filatest.RequireOpts{Queue: "mail"})
	})
	require.Contains(t, msg, `queue "billing", not "mail"`)
	msg = fails(t, func(tb testing.TB) {
		filatest.RequireInsertedTx[invoice](ctx, tb, tx, &filatest.RequireOpts{Metadata: map[string]any{"tenant": "acme"}})
	})
	require.Contains(t, msg, "tenant")
	msg = fails(t, func(tb testing.TB) { filatest.RequireNotInsertedTx[invoice](ctx, tb, tx) })
	require.Contains(t, msg, `2 job(s) of kind "invoice" were inserted`)
	// Outside the transaction there is nothing yet.
	msg = fails(t, func(tb testing.TB) { filatest.RequireInsertedTx[invoice](ctx, tb, db.Pool, nil) })
	require.Contains(t, msg, `no job of kind "invoice"`)

	// A payload that does not decode into the type is named.
	_, err = tx.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('invoice', '{"cents": "many"}')`)
	require.NoError(t, err)
	msg = fails(t, func(tb testing.TB) { filatest.InsertedTx[invoice](ctx, tb, tx) })
	require.Contains(t, msg, "does not decode into filatest_test.invoice")
}

// A Worker runs one attempt in the test's transaction and leaves the job
// as a worker's runtime would: completed with its output, retried after
// its backoff, dead, snoozed without spending the attempt, or completed by
// the handler itself in the same transaction.
func TestWorkerRunsOneAttemptInTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filatest.NewDB(t)
	var seen []*runtime.Job
	w := filatest.NewWorker(t, runtime.Work(func(ctx context.Context, j *runtime.Job, a invoice) error {
		seen = append(seen, j)
		switch a.Customer {
		case "ok":
			return j.SetOutput(map[string]int{"charged": a.Cents})
		case "flaky":
			return errors.New("gateway timeout")
		case "bad":
			return runtime.Permanent(errors.New("no such customer"))
		case "later":
			return runtime.Snooze(time.Hour)
		case "self":
			return runtime.CompleteTx(ctx, ctxTx(ctx), j)
		}
		return nil
	}), func(next runtime.Handler) runtime.Handler {
		return func(ctx context.Context, j *runtime.Job) error { return next(withTx(ctx, txOf[j.ID]), j) }
	})
	tx := db.Tx(t)
	work := func(customer string) runtime.WorkResult {
		res, err := runtime.InsertArgsTx(ctx, tx, invoice{Customer: customer, Cents: 5}, nil)
		require.NoError(t, err)
		txOf[res.ID] = tx
		return w.WorkJobTx(ctx, t, tx, res.ID)
	}

	ok := work("ok")
	require.NoError(t, ok.Err)
	require.Equal(t, runtime.OutcomeCompleted, ok.Outcome)
	require.Equal(t, "completed", ok.Job.State)
	require.JSONEq(t, `{"charged": 5}`, string(ok.Job.Output))
	require.Equal(t, 1, seen[0].Attempt)
	require.Equal(t, 3, seen[0].MaxAttempts)
	require.Equal(t, "billing", seen[0].Queue)

	flaky := work("flaky")
	require.EqualError(t, flaky.Err, "gateway timeout")
	require.Equal(t, runtime.OutcomeRetried, flaky.Outcome)
	require.Equal(t, "pending", flaky.Job.State)
	require.Equal(t, 1, flaky.Job.Attempts)
	require.Equal(t, "gateway timeout", flaky.Job.LastError)
	require.True(t, flaky.Job.RunAt.After(time.Now()), "due after its backoff")

	bad := work("bad")
	require.Equal(t, runtime.OutcomeDead, bad.Outcome)
	require.Equal(t, "dead", bad.Job.State)

	later := work("later")
	require.Equal(t, runtime.OutcomeSnoozed, later.Outcome)
	require.Equal(t, "pending", later.Job.State)
	require.Zero(t, later.Job.Attempts, "a snooze spends no attempt")
	require.True(t, later.Job.RunAt.After(time.Now().Add(50*time.Minute)))

	self := work("self")
	require.NoError(t, self.Err)
	require.Equal(t, "completed", self.Job.State)

	// A job that is not due, of another kind or unknown is refused, naming why.
	res, err := runtime.InsertArgsTx(ctx, tx, invoice{Customer: "ok"}, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Contains(t, fails(t, func(tb testing.TB) { w.WorkJobTx(ctx, tb, tx, res.ID) }), "not pending and due now")
	res, err = runtime.InsertArgsTx(ctx, tx, other{}, nil)
	require.NoError(t, err)
	require.Contains(t, fails(t, func(tb testing.TB) { w.WorkJobTx(ctx, tb, tx, res.ID) }), `it is of kind "other", not "invoice"`)
	require.Contains(t, fails(t, func(tb testing.TB) { w.WorkTx(ctx, tb, tx, other{}, nil) }), `args of kind "other"`)

	// Nothing of it outside the transaction.
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&n))
	require.Zero(t, n)
}

// The test's transaction, for a handler that completes its job in it.
var txOf = map[int64]runtime.DB{}

type txKey struct{}

func withTx(ctx context.Context, tx runtime.DB) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

func ctxTx(ctx context.Context) runtime.DB { return ctx.Value(txKey{}).(runtime.DB) }
