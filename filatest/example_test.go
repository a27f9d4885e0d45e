package filatest_test

import (
	"context"
	"testing"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

// placeOrder is the code under test: it enqueues an invoice in the
// caller's transaction.
func placeOrder(ctx context.Context, tx runtime.DB, customer string) error {
	_, err := runtime.NewClient(tx).InsertTx(ctx, tx, invoice{Customer: customer, Cents: 1999}, nil)
	return err
}

// A test of your own: the job your code enqueued in the test's
// transaction, with its args; then its handler, run once in the same
// transaction. (An example has no *testing.T: TestExample runs this one's
// test function.)
func Example() {
	exampleTest = func(t *testing.T) {
		ctx := context.Background()
		db := filatest.NewDB(t) // a migrated database of this test's own
		tx := db.Tx(t)          // rolled back when the test ends

		if err := placeOrder(ctx, tx, "acme"); err != nil {
			t.Fatal(err)
		}
		job := filatest.RequireInsertedTx[invoice](ctx, t, tx, &filatest.RequireOpts{Queue: "billing"})
		if job.Args.Cents != 1999 {
			t.Errorf("invoiced %d cents", job.Args.Cents)
		}

		w := filatest.NewWorker(t, runtime.Work(func(ctx context.Context, j *runtime.Job, inv invoice) error {
			return j.SetOutput(map[string]int{"charged": inv.Cents})
		}))
		res := w.WorkJobTx(ctx, t, tx, job.Row.ID)
		if res.Outcome != runtime.OutcomeCompleted || string(res.Job.Output) != `{"charged": 1999}` {
			t.Errorf("outcome %s, output %s", res.Outcome, res.Job.Output)
		}
	}
}

// exampleTest is the test function Example declares.
var exampleTest func(t *testing.T)

func TestExample(t *testing.T) {
	Example()
	exampleTest(t)
}
