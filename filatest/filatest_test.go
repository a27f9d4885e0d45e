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

	// The retried and the snoozed job run again when the test asks: inside
	// the transaction now() stands still, and they are made due at it.
	again := w.WorkJobTx(ctx, t, tx, flaky.Job.ID)
	require.Equal(t, runtime.OutcomeRetried, again.Outcome)
	require.Equal(t, 2, again.Job.Attempts)
	require.Equal(t, 2, seen[len(seen)-1].Attempt)
	woke := w.WorkJobTx(ctx, t, tx, later.Job.ID)
	require.Equal(t, runtime.OutcomeSnoozed, woke.Outcome, "its handler ran again")
	// So does a job scheduled later.
	res, err := runtime.InsertArgsTx(ctx, tx, invoice{Customer: "ok"}, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, runtime.OutcomeCompleted, w.WorkJobTx(ctx, t, tx, res.ID).Outcome)

	// A finished job, one of another kind or an unknown one is refused,
	// naming why.
	require.Contains(t, fails(t, func(tb testing.TB) { w.WorkJobTx(ctx, tb, tx, res.ID) }), "it is completed, not pending and due now")
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

func TestNewDBWithAPrefix(t *testing.T) {
	t.Parallel()
	db := filatest.NewDB(t, filatest.Prefix("billing_app"))
	require.True(t, strings.HasPrefix(db.Name, "billing_app_"), db.Name)
	var name string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&name))
	require.Equal(t, db.Name, name)
	require.Contains(t, fails(t, func(tb testing.TB) { filatest.NewDB(tb, filatest.Prefix("Billing-App")) }),
		`database name prefix "Billing-App": only lower-case letters, digits and _ (a letter first), not 'B'`)
	require.Contains(t, fails(t, func(tb testing.TB) { filatest.NewDB(tb, filatest.Prefix(strings.Repeat("a", 51))) }),
		"give 1 to 50 characters")
}

func TestRequireManyInsertedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filatest.NewDB(t)
	tx := db.Tx(t)
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, a := range []runtime.JobArgs{invoice{Customer: "a"}, other{}, invoice{Customer: "b"}} {
		var opts *runtime.InsertOpts
		if a.Kind() == "other" {
			opts = &runtime.InsertOpts{RunAt: at, Priority: 2}
		}
		_, err := runtime.InsertArgsTx(ctx, tx, a, opts)
		require.NoError(t, err)
	}

	rows := filatest.RequireManyInsertedTx(ctx, t, tx, []filatest.Expected{
		{Args: invoice{}, Opts: &filatest.RequireOpts{Queue: "billing"}},
		{Args: other{}, Opts: &filatest.RequireOpts{Priority: 2, ScheduledAt: at}},
		{Args: invoice{}},
	})
	require.Len(t, rows, 3)
	require.JSONEq(t, `{"customer": "b", "cents": 0}`, string(rows[2].Payload))

	require.Contains(t, fails(t, func(tb testing.TB) {
		filatest.RequireManyInsertedTx(ctx, tb, tx, []filatest.Expected{{Args: other{}}, {Args: invoice{}}, {Args: invoice{}}})
	}), "kinds [invoice other invoice], not [other invoice invoice]")
	require.Contains(t, fails(t, func(tb testing.TB) {
		filatest.RequireManyInsertedTx(ctx, tb, tx, []filatest.Expected{{Args: invoice{}}})
	}), "kinds [invoice invoice], not [invoice]", "an expected kind's extra job is not ignored")
	// Jobs of kinds not expected are not looked at.
	filatest.RequireManyInsertedTx(ctx, t, tx, []filatest.Expected{{Args: invoice{}}, {Args: invoice{}}})
	require.Contains(t, fails(t, func(tb testing.TB) {
		filatest.RequireManyInsertedTx(ctx, tb, tx, []filatest.Expected{
			{Args: invoice{}}, {Args: other{}, Opts: &filatest.RequireOpts{ScheduledAt: at.Add(time.Second)}}, {Args: invoice{}},
		})
	}), "(the 2. expected, kind \"other\"): scheduled at")
	require.Contains(t, fails(t, func(tb testing.TB) { filatest.RequireManyInsertedTx(ctx, tb, tx, nil) }), "no job expected")

	// ScheduledAt in RequireInsertedTx too.
	filatest.RequireInsertedTx[other](ctx, t, tx, &filatest.RequireOpts{ScheduledAt: at})
	require.Contains(t, fails(t, func(tb testing.TB) {
		filatest.RequireInsertedTx[other](ctx, tb, tx, &filatest.RequireOpts{ScheduledAt: at.Add(-time.Minute)})
	}), "scheduled at")
}
