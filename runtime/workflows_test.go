package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// wfStep is a step of the workflows below: its kind is "wf", its payload
// names it.
func wfStep(name string, after ...string) runtime.WorkflowJob {
	return runtime.WorkflowJob{Name: name, After: after,
		InsertParams: runtime.InsertParams{Kind: "wf", Payload: map[string]string{"step": name}}}
}

// runs counts each step's attempts, in the order they started.
type runs struct {
	mu    sync.Mutex
	order []string
	n     map[string]int
}

func (r *runs) add(step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.order = append(r.order, step)
	r.n[step]++
}

func (r *runs) count(step string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[step]
}

func (r *runs) started() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

func stepOf(t *testing.T, j *runtime.Job) string {
	var p struct {
		Step string `json:"step"`
	}
	if err := j.Decode(&p); err != nil {
		t.Errorf("job %d: %v", j.ID, err)
	}
	return p.Step
}

func statesOf(t *testing.T, jobs []runtime.WorkflowJobRow) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, j := range jobs {
		out[j.WorkflowStep] = j.State
	}
	return out
}

// Every job of a workflow carries its id (its first job's) and its step's
// name; the workflow lists its jobs by that id, and a cancel of the
// workflow cancels every job not finished — the running one stopped, the
// waiting one never run — and leaves the finished ones as they were.
func TestWorkflowListAndCancelAsAUnit(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var (
		seen      runs
		bStarted  = make(chan struct{})
		bReturned = make(chan error, 1)
	)
	cfg := baseConfig(t, db, runtime.Kind{Name: "wf", Handler: func(ctx context.Context, j *runtime.Job) error {
		step := stepOf(t, j)
		seen.add(step)
		if step == "b" {
			// Runs until the workflow is cancelled.
			close(bStarted)
			<-ctx.Done()
			bReturned <- context.Cause(ctx)
			return context.Cause(ctx)
		}
		return j.SetOutput(map[string]string{"from": step})
	}}, runtime.Kind{Name: "after", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.Concurrency = 4
	start(t, cfg)

	// a, then b and d; c after b.
	wf, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{
		wfStep("a"), wfStep("b", "a"), wfStep("c", "b"), wfStep("d", "a"),
	})
	require.NoError(t, err)
	require.Len(t, wf.JobIDs, 4)
	require.Equal(t, wf.JobIDs[0], wf.ID, "a workflow is named by its first job")

	// Another workflow, to show that each lists only its own.
	other, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{wfStep("other")})
	require.NoError(t, err)
	require.NotEqual(t, wf.ID, other.ID)

	select {
	case <-bStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("step b did not start")
	}
	waitFor(t, 30*time.Second, "d completes", func() bool {
		s, _, _ := jobState(t, db, wf.JobIDs[3])
		return s == runtime.StateCompleted
	})

	jobs, err := runtime.ListWorkflowJobs(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Len(t, jobs, 4)
	for i, j := range jobs {
		require.Equal(t, wf.ID, *j.WorkflowID)
		require.Equal(t, wf.JobIDs[i], j.ID, "in id order, each after the jobs it waits for")
	}
	require.Equal(t, []string{"a", "b", "c", "d"}, []string{jobs[0].WorkflowStep, jobs[1].WorkflowStep, jobs[2].WorkflowStep, jobs[3].WorkflowStep})
	require.Equal(t, []string{"b"}, jobs[2].After)
	require.Equal(t, []string{"a"}, jobs[1].After)
	require.Equal(t, map[string]string{"a": "completed", "b": "running", "c": "waiting", "d": "completed"}, statesOf(t, jobs))

	// The same jobs through the listing's filter, and a job's own row.
	listed, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{WorkflowID: wf.ID, Ascending: true, OrderBy: runtime.OrderID})
	require.NoError(t, err)
	require.Len(t, listed, 4)
	require.Equal(t, wf.JobIDs[0], listed[0].ID)
	row, err := runtime.GetJob(ctx, db.Pool, wf.JobIDs[2])
	require.NoError(t, err)
	require.Equal(t, "c", row.WorkflowStep)
	require.Equal(t, wf.ID, *row.WorkflowID)

	got, err := runtime.GetWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Equal(t, runtime.WorkflowActive, got.State)
	require.Equal(t, 4, got.Jobs)
	require.Equal(t, map[string]int{"completed": 2, "running": 1, "waiting": 1}, got.Counts)

	res, err := runtime.CancelWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Empty(t, res.Skipped)
	require.Equal(t, []int64{wf.JobIDs[1], wf.JobIDs[2]}, res.IDs(), "only the unfinished jobs")
	require.Equal(t, runtime.StateRunning, res.Changed[0].From)
	require.Equal(t, runtime.StateWaiting, res.Changed[1].From)

	select {
	case cause := <-bReturned:
		require.ErrorIs(t, cause, runtime.ErrCancelled)
	case <-time.After(30 * time.Second):
		t.Fatal("the running step was not stopped")
	}
	// A job enqueued after the cancel runs; by then the workers have
	// claimed again, and nothing of the workflow was there to claim.
	after, err := runtime.Insert(ctx, db.Pool, "after", nil, nil)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the job after completes", func() bool {
		s, _, _ := jobState(t, db, after)
		return s == runtime.StateCompleted
	})
	jobs, err = runtime.ListWorkflowJobs(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "completed", "b": "cancelled", "c": "cancelled", "d": "completed"}, statesOf(t, jobs))
	require.Equal(t, 0, seen.count("c"), "the waiting step never ran")
	require.Equal(t, 1, seen.count("b"))
	require.Equal(t, 1, seen.count("a"))
	require.Equal(t, 0, jobs[2].Attempts)

	got, err = runtime.GetWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Equal(t, runtime.WorkflowCancelled, got.State)
	require.NotNil(t, got.FinishedAt)

	// Nothing left to cancel: nothing changes.
	res, err = runtime.CancelWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Empty(t, res.Changed)

	// The newest workflow is listed first.
	list, err := runtime.ListWorkflows(ctx, db.Pool, runtime.WorkflowFilter{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []int64{other.ID, wf.ID}, []int64{list[0].ID, list[1].ID})
	require.Equal(t, runtime.WorkflowCancelled, list[1].State)
	list, err = runtime.ListWorkflows(ctx, db.Pool, runtime.WorkflowFilter{BeforeID: other.ID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, wf.ID, list[0].ID)

	for name, call := range map[string]func() error{
		"get":    func() error { _, err := runtime.GetWorkflow(ctx, db.Pool, 999999); return err },
		"list":   func() error { _, err := runtime.ListWorkflowJobs(ctx, db.Pool, 999999); return err },
		"cancel": func() error { _, err := runtime.CancelWorkflow(ctx, db.Pool, 999999); return err },
		"retry":  func() error { _, err := runtime.RetryWorkflow(ctx, db.Pool, 999999); return err },
	} {
		require.ErrorIs(t, call(), runtime.ErrWorkflowNotFound, name)
	}
	_, err = runtime.CancelWhere(ctx, db.Pool, runtime.JobFilter{State: runtime.StatePending, WorkflowID: wf.ID})
	require.ErrorContains(t, err, "WorkflowID")
}

// A step that fails to dead makes the steps after it dead; a retry of the
// workflow runs the dead step again and then the steps after it, in
// order, and the completed steps do not run again. Each step reads its
// dependencies' outputs by their step names, typed.
func TestWorkflowRetryAsAUnitAndOutputsByStep(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	type out struct {
		From string `json:"from"`
		N    int    `json:"n"`
	}
	var (
		seen     runs
		failB    atomic.Bool
		mu       sync.Mutex
		readByC  map[string]out
		byStep   map[string]runtime.DependencyOutput
		missing  error
		noOutput error
	)
	failB.Store(true)
	cfg := baseConfig(t, db, runtime.Kind{Name: "wf", Handler: func(ctx context.Context, j *runtime.Job) error {
		step := stepOf(t, j)
		seen.add(step)
		switch step {
		case "b":
			if failB.Load() {
				return runtime.Permanent(errors.New("b failed on purpose"))
			}
		case "c":
			a, err := runtime.StepOutput[out](ctx, db.Pool, j.ID, "a")
			if err != nil {
				return err
			}
			b, err := runtime.StepOutput[out](ctx, db.Pool, j.ID, "b")
			if err != nil {
				return err
			}
			all, err := runtime.DependencyOutputsByStep(ctx, db.Pool, j.ID)
			if err != nil {
				return err
			}
			_, errMissing := runtime.StepOutput[out](ctx, db.Pool, j.ID, "d")
			mu.Lock()
			readByC, byStep, missing = map[string]out{"a": a, "b": b}, all, errMissing
			mu.Unlock()
		case "e":
			_, err := runtime.StepOutput[out](ctx, db.Pool, j.ID, "quiet")
			mu.Lock()
			noOutput = err
			mu.Unlock()
			return nil
		case "quiet":
			return nil // records no output
		}
		return j.SetOutput(out{From: step, N: len(step) + 10*len(seen.started())})
	}})
	cfg.Concurrency = 4
	start(t, cfg)

	// a → b → c (c also after a), a → d; quiet → e. Given so that the ids'
	// order is not the names' order: c reads by name, not by position.
	wf, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{
		wfStep("c", "b", "a"), wfStep("d", "a"), wfStep("b", "a"), wfStep("a"), wfStep("e", "quiet"), wfStep("quiet"),
	})
	require.NoError(t, err)
	id := func(step string) int64 {
		for i, n := range []string{"c", "d", "b", "a", "e", "quiet"} {
			if n == step {
				return wf.JobIDs[i]
			}
		}
		t.Fatalf("no step %q", step)
		return 0
	}
	waitFor(t, 30*time.Second, "b and c end dead, a, d and e complete", func() bool {
		jobs, err := runtime.ListWorkflowJobs(ctx, db.Pool, wf.ID)
		require.NoError(t, err)
		s := statesOf(t, jobs)
		return s["a"] == "completed" && s["d"] == "completed" && s["b"] == "dead" && s["c"] == "dead" && s["e"] == "completed"
	})
	_, _, lastErr := jobState(t, db, id("c"))
	require.Contains(t, lastErr, "ended dead")
	require.Equal(t, 0, seen.count("c"))
	mu.Lock()
	require.ErrorIs(t, noOutput, runtime.ErrNoOutput, "a step that recorded nothing")
	mu.Unlock()
	got, err := runtime.GetWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Equal(t, runtime.WorkflowDead, got.State)

	failB.Store(false)
	res, err := runtime.RetryWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Empty(t, res.Skipped)
	require.Len(t, res.Changed, 2)
	require.Equal(t, runtime.JobChange{ID: id("b"), From: "dead", To: "pending"}, res.Changed[0])
	require.Equal(t, runtime.JobChange{ID: id("c"), From: "dead", To: "waiting"}, res.Changed[1], "c waits for b again")

	waitFor(t, 30*time.Second, "the workflow completes", func() bool {
		got, err := runtime.GetWorkflow(ctx, db.Pool, wf.ID)
		require.NoError(t, err)
		return got.State == runtime.WorkflowCompleted
	})
	require.Equal(t, 1, seen.count("a"), "a completed: it does not run again")
	require.Equal(t, 1, seen.count("d"))
	require.Equal(t, 1, seen.count("quiet"))
	require.Equal(t, 1, seen.count("e"))
	require.Equal(t, 2, seen.count("b"))
	require.Equal(t, 1, seen.count("c"))
	order := seen.started()
	require.Equal(t, "c", order[len(order)-1], "c runs after b's second attempt")
	require.Equal(t, "b", order[len(order)-2])
	_, attempts, _ := jobState(t, db, id("b"))
	require.Equal(t, 1, attempts, "attempts start over")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "a", readByC["a"].From)
	require.Equal(t, "b", readByC["b"].From)
	require.Len(t, byStep, 2)
	require.Equal(t, id("a"), byStep["a"].ID)
	require.Equal(t, id("b"), byStep["b"].ID)
	require.JSONEq(t, `"b"`, string(mustField(t, byStep["b"].Output, "from")))
	require.ErrorIs(t, missing, runtime.ErrStepNotFound, "d is a step, but not one c waits for")

	// Nothing failed is left: a retry changes nothing.
	res, err = runtime.RetryWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
}

// mustField is one field of a JSON object.
func mustField(t *testing.T, raw []byte, key string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[key]
}

// A step that waits for a job outside the workflow that is still dead ends
// as at its insert when the workflow is retried, and says why.
func TestWorkflowRetryKeepsAnOutsideDependencyDead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	// No runtime: the states are written as workers would leave them.
	outside, err := runtime.Insert(ctx, db.Pool, "wf", nil, nil)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "UPDATE fila_jobs SET state = 'dead', finished_at = now() WHERE id = $1", outside)
	require.NoError(t, err)
	late := wfStep("late", "first")
	late.InsertParams.After = []int64{outside}
	wf, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{wfStep("first"), late})
	require.NoError(t, err)
	s, _, _ := jobState(t, db, wf.JobIDs[1])
	require.Equal(t, runtime.StateDead, s, "its outside dependency is dead")
	_, err = db.Pool.Exec(ctx, "UPDATE fila_jobs SET state = 'dead', finished_at = now() WHERE id = $1", wf.JobIDs[0])
	require.NoError(t, err)

	res, err := runtime.RetryWorkflow(ctx, db.Pool, wf.ID)
	require.NoError(t, err)
	require.Equal(t, []int64{wf.JobIDs[0]}, res.IDs())
	require.Len(t, res.Skipped, 1)
	require.Equal(t, wf.JobIDs[1], res.Skipped[0].ID)
	require.Contains(t, res.Skipped[0].Reason, "dependency")
	s, _, _ = jobState(t, db, wf.JobIDs[0])
	require.Equal(t, runtime.StatePending, s)
}
