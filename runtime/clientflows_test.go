package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

type fetchReport struct {
	Account string `json:"account"`
}

func (fetchReport) Kind() string { return "fetch-report" }

func (fetchReport) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "reports", MaxAttempts: 3, Metadata: map[string]any{"team": "billing"}}
}

type mailReport struct {
	To string `json:"to"`
}

func (mailReport) Kind() string { return "mail-report" }

// tracing is an insert middleware that stamps every job it sees and
// counts them.
func tracing(seen *atomic.Int64) runtime.InsertMiddleware {
	return func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			for _, j := range jobs {
				md := map[string]any{"trace": "t-1"}
				for k, v := range j.Metadata {
					md[k] = v
				}
				j.Metadata = md
			}
			seen.Add(int64(len(jobs)))
			return next(ctx, jobs)
		}
	}
}

func metadataOf(t *testing.T, j *runtime.JobRow) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(j.Metadata, &m))
	return m
}

// A workflow inserted through a Client goes through its middleware and
// takes each type's InsertOpts, as the Client's single inserts do.
func TestClientWorkflowThroughMiddlewareWithTypeDefaults(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var seen atomic.Int64
	c := runtime.NewClient(db.Pool, tracing(&seen))

	ids, err := c.InsertWorkflow(ctx, []runtime.WorkflowStep{
		{Name: "fetch", Args: fetchReport{Account: "a1"}},
		{Name: "mail", After: []string{"fetch"}, Args: mailReport{To: "x@example.com"}, Opts: &runtime.InsertOpts{Priority: 2}},
	})
	require.NoError(t, err)
	require.Len(t, ids, 2)
	require.EqualValues(t, 2, seen.Load(), "the middleware saw both steps")

	fetch, err := runtime.GetJob(ctx, db.Pool, ids[0])
	require.NoError(t, err)
	require.Equal(t, "reports", fetch.Queue, "the type's InsertOpts")
	require.Equal(t, 3, fetch.MaxAttempts)
	require.Equal(t, runtime.StatePending, fetch.State)
	require.Equal(t, "billing", metadataOf(t, fetch)["team"])
	require.Equal(t, "t-1", metadataOf(t, fetch)["trace"], "the middleware's metadata")

	mail, err := runtime.GetJob(ctx, db.Pool, ids[1])
	require.NoError(t, err)
	require.Equal(t, runtime.StateWaiting, mail.State, "it waits for fetch")
	require.EqualValues(t, 2, mail.Priority)
	require.Equal(t, "t-1", metadataOf(t, mail)["trace"])
	flow, err := runtime.GetJobFlow(ctx, db.Pool, ids[1])
	require.NoError(t, err)
	require.Len(t, flow.Dependencies, 1)
	require.Equal(t, ids[0], flow.Dependencies[0].ID)

	// A graph that is not one is refused before the middleware runs.
	_, err = c.InsertWorkflow(ctx, []runtime.WorkflowStep{{Name: "a", After: []string{"nope"}, Args: mailReport{}}})
	require.ErrorIs(t, err, runtime.ErrWorkflow)
	require.EqualValues(t, 2, seen.Load())

	// Inside a transaction that rolls back, nothing is left.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertWorkflowTx(ctx, tx, []runtime.WorkflowStep{{Name: "only", Args: mailReport{}}})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&n))
	require.Equal(t, 2, n)
}

// A middleware that changes the number of a workflow's jobs is refused:
// the graph no longer matches them.
func TestClientWorkflowRefusesAMiddlewareThatDropsAStep(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	drop := func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			return next(ctx, jobs[:1])
		}
	}
	_, err := runtime.NewClient(db.Pool, drop).InsertWorkflow(context.Background(), []runtime.WorkflowStep{
		{Name: "a", Args: mailReport{}}, {Name: "b", After: []string{"a"}, Args: mailReport{}},
	})
	require.ErrorContains(t, err, "the insert middleware turned 2 steps into 1 jobs")
}

func TestClientBatchThroughMiddleware(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var seen atomic.Int64
	c := runtime.NewClient(db.Pool, tracing(&seen))
	batch, ids, err := c.InsertBatch(ctx, []runtime.ArgsParams{
		{Args: fetchReport{Account: "a1"}}, {Args: fetchReport{Account: "a2"}}, {Args: mailReport{To: "y"}},
	}, runtime.BatchCallback{Kind: "batch-done"})
	require.NoError(t, err)
	require.Positive(t, batch)
	require.Len(t, ids, 3)
	require.EqualValues(t, 3, seen.Load())
	b, err := runtime.GetBatch(ctx, db.Pool, batch)
	require.NoError(t, err)
	require.True(t, b.Sealed)
	require.Equal(t, 3, b.Total)
	j, err := runtime.GetJob(ctx, db.Pool, ids[1])
	require.NoError(t, err)
	require.Equal(t, "reports", j.Queue)
	require.Equal(t, "t-1", metadataOf(t, j)["trace"])

	_, _, err = c.InsertBatch(ctx, []runtime.ArgsParams{{Args: nil}}, runtime.BatchCallback{Kind: "k"})
	require.True(t, err != nil && !errors.Is(err, runtime.ErrWorkflow), "nil args: %v", err)
}

// A workflow inserted through a client carries its id and step names, and
// a step reads the output of the step before it, typed, by name.
func TestClientWorkflowIDAndStepOutputByName(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var seen atomic.Int64
	c := runtime.NewClient(db.Pool, tracing(&seen))

	wf, err := c.InsertWorkflowID(ctx, []runtime.WorkflowStep{
		{Name: "mail", After: []string{"fetch"}, Args: mailReport{To: "x@example.com"}},
		{Name: "fetch", Args: fetchReport{Account: "a1"}},
	})
	require.NoError(t, err)
	require.Len(t, wf.JobIDs, 2)
	require.Equal(t, wf.JobIDs[1], wf.ID, "fetch comes first: its id names the workflow")
	for i, step := range []string{"mail", "fetch"} {
		j, err := runtime.GetJob(ctx, db.Pool, wf.JobIDs[i])
		require.NoError(t, err)
		require.Equal(t, wf.ID, *j.WorkflowID)
		require.Equal(t, step, j.WorkflowStep)
	}

	// fetch completes with an output, as its handler would leave it.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'running', attempts = 1, started_at = now(), lease_until = now() + interval '1 minute' WHERE id = $1`, wf.ID)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now(), output = '{"account": "a1", "rows": 42}' WHERE id = $1`, wf.ID)
	require.NoError(t, err)
	type fetched struct {
		Account string `json:"account"`
		Rows    int    `json:"rows"`
	}
	got, err := runtime.StepOutput[fetched](ctx, db.Pool, wf.JobIDs[0], "fetch")
	require.NoError(t, err)
	require.Equal(t, fetched{Account: "a1", Rows: 42}, got)
	_, err = runtime.StepOutput[[]int](ctx, db.Pool, wf.JobIDs[0], "fetch")
	require.ErrorContains(t, err, "does not decode into []int")
	_, err = runtime.StepOutput[fetched](ctx, db.Pool, wf.JobIDs[0], "nope")
	require.ErrorIs(t, err, runtime.ErrStepNotFound)
	mail, err := runtime.GetJob(ctx, db.Pool, wf.JobIDs[0])
	require.NoError(t, err)
	require.Equal(t, runtime.StatePending, mail.State, "fetch's finish let mail go")

	// A step name too long is refused, naming the job.
	_, err = c.InsertWorkflowID(ctx, []runtime.WorkflowStep{{Name: strings.Repeat("x", runtime.StepNameMax+1), Args: mailReport{}}})
	require.ErrorIs(t, err, runtime.ErrWorkflow)
	require.ErrorContains(t, err, "at most 200")
}
