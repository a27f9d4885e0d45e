package runtime

import (
	"context"
	"fmt"
)

// WorkflowStep is one typed job of a workflow inserted through a Client
// (Client.InsertWorkflow): its args, with options over what the type
// declares, as Client.Insert takes them, and its place in the graph.
type WorkflowStep struct {
	// Name identifies the step in its workflow, for the After of the
	// others. Required; unique within the workflow.
	Name string
	// After names the steps that must complete before this one runs.
	After []string
	Args  JobArgs
	Opts  *InsertOpts
}

// flowInsert is what a Client's innermost insert does instead of inserting
// jobs one by one, for a workflow or a batch. It travels in the context
// through the middleware, which sees (and may change) every job's
// parameters as it sees a plain insert's.
type flowInsert struct {
	steps []WorkflowStep // a workflow's graph, in the jobs' order
	batch *BatchCallback // a batch's callback
	id    int64          // the batch's or the workflow's id, once inserted
}

type flowKey struct{}

// insertFlow is the database's end of a Client's workflow or batch.
func insertFlow(ctx context.Context, db DB, f *flowInsert, jobs []*InsertParams) ([]Inserted, error) {
	params := make([]InsertParams, len(jobs))
	for i, p := range jobs {
		params[i] = *p
	}
	var ids []int64
	var err error
	switch {
	case f.steps != nil:
		if len(jobs) != len(f.steps) {
			return nil, fmt.Errorf("insert workflow: the insert middleware turned %d steps into %d jobs", len(f.steps), len(jobs))
		}
		wf := make([]WorkflowJob, len(jobs))
		for i, s := range f.steps {
			wf[i] = WorkflowJob{Name: s.Name, After: s.After, InsertParams: params[i]}
		}
		var w InsertedWorkflow
		w, err = InsertWorkflowID(ctx, db, wf)
		f.id, ids = w.ID, w.JobIDs
	default:
		f.id, ids, err = InsertBatch(ctx, db, params, *f.batch)
	}
	if err != nil {
		return nil, err
	}
	res := make([]Inserted, len(ids))
	for i, id := range ids {
		res[i] = Inserted{ID: id}
	}
	return res, nil
}

// InsertWorkflow inserts a workflow of typed jobs (see the untyped
// InsertWorkflow) through the client's insert middleware, each job with
// its type's InsertOpts under its own: one statement, all or none. It
// returns the jobs' ids in the order of steps.
func (c *Client) InsertWorkflow(ctx context.Context, steps []WorkflowStep) ([]int64, error) {
	return c.InsertWorkflowTx(ctx, c.db, steps)
}

// InsertWorkflowTx is InsertWorkflow inside the caller's transaction.
func (c *Client) InsertWorkflowTx(ctx context.Context, tx DB, steps []WorkflowStep) ([]int64, error) {
	w, err := c.InsertWorkflowIDTx(ctx, tx, steps)
	return w.JobIDs, err
}

// InsertWorkflowID is InsertWorkflow, returning the workflow's id with its
// jobs' ids (see the untyped InsertWorkflowID).
func (c *Client) InsertWorkflowID(ctx context.Context, steps []WorkflowStep) (InsertedWorkflow, error) {
	return c.InsertWorkflowIDTx(ctx, c.db, steps)
}

// InsertWorkflowIDTx is InsertWorkflowID inside the caller's transaction.
func (c *Client) InsertWorkflowIDTx(ctx context.Context, tx DB, steps []WorkflowStep) (InsertedWorkflow, error) {
	if len(steps) == 0 {
		return InsertedWorkflow{}, nil
	}
	params := make([]*InsertParams, len(steps))
	for i, s := range steps {
		p, err := argsParams(s.Args, s.Opts)
		if err != nil {
			return InsertedWorkflow{}, fmt.Errorf("insert workflow: step %q: %w", s.Name, err)
		}
		params[i] = &p
	}
	// The graph is checked before the middleware runs: a span or a log
	// line of the middleware is not written for a workflow refused anyway.
	wf := make([]WorkflowJob, len(steps))
	for i, s := range steps {
		wf[i] = WorkflowJob{Name: s.Name, After: s.After}
	}
	if _, err := workflowOrder(wf); err != nil {
		return InsertedWorkflow{}, fmt.Errorf("insert workflow: %w", err)
	}
	f := &flowInsert{steps: steps}
	res, err := c.insert(context.WithValue(context.WithValue(ctx, targetKey{}, tx), flowKey{}, f), params)
	if err != nil {
		return InsertedWorkflow{}, err
	}
	return InsertedWorkflow{ID: f.id, JobIDs: insertedIDs(res)}, nil
}

// InsertBatch creates a batch of typed jobs with a callback (see the
// untyped InsertBatch) through the client's insert middleware, each job
// with its type's InsertOpts under its own, and returns the batch's id and
// the jobs' ids.
func (c *Client) InsertBatch(ctx context.Context, jobs []ArgsParams, cb BatchCallback) (int64, []int64, error) {
	return c.InsertBatchTx(ctx, c.db, jobs, cb)
}

// InsertBatchTx is InsertBatch inside the caller's transaction.
func (c *Client) InsertBatchTx(ctx context.Context, tx DB, jobs []ArgsParams, cb BatchCallback) (int64, []int64, error) {
	params := make([]*InsertParams, len(jobs))
	for i, j := range jobs {
		p, err := argsParams(j.Args, j.Opts)
		if err != nil {
			return 0, nil, fmt.Errorf("insert batch: job %d: %w", i, err)
		}
		params[i] = &p
	}
	f := &flowInsert{batch: &cb}
	res, err := c.insert(context.WithValue(context.WithValue(ctx, targetKey{}, tx), flowKey{}, f), params)
	if err != nil {
		return 0, nil, err
	}
	return f.id, insertedIDs(res), nil
}

func insertedIDs(res []Inserted) []int64 {
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}
