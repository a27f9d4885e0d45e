package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A diamond workflow runs each job after those it comes after, and the
// last reads the outputs of the two before it; a dependency that dies
// makes its dependents dead, cancelled or run anyway, as each says.
func TestWorkflow(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		ran     []string
		outputs []runtime.DependencyOutput
	)
	cfg := baseConfig(t, db, runtime.Kind{Name: "step", Handler: func(ctx context.Context, j *runtime.Job) error {
		var p struct {
			Name string `json:"name"`
			Fail bool   `json:"fail"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		if p.Name == "d" {
			outs, err := runtime.DependencyOutputs(ctx, db.Pool, j.ID)
			if err != nil {
				return err
			}
			mu.Lock()
			outputs = outs
			mu.Unlock()
		}
		mu.Lock()
		ran = append(ran, p.Name)
		mu.Unlock()
		if p.Fail {
			return runtime.Permanent(errors.New("failed on purpose"))
		}
		return j.SetOutput(map[string]string{"from": p.Name})
	}})
	cfg.Concurrency = 10
	start(t, cfg)

	step := func(name string, fail bool, after ...string) runtime.WorkflowJob {
		return runtime.WorkflowJob{Name: name, After: after,
			InsertParams: runtime.InsertParams{Kind: "step", Payload: map[string]any{"name": name, "fail": fail}}}
	}
	// Given out of order: the workflow orders them.
	ids, err := runtime.InsertWorkflow(ctx, db.Pool, []runtime.WorkflowJob{
		step("d", false, "b", "c"), step("b", false, "a"), step("c", false, "a"), step("a", false),
	})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the diamond completes", func() bool { return countState(t, db, "completed") == 4 })
	mu.Lock()
	require.Equal(t, "a", ran[0])
	require.Equal(t, "d", ran[3])
	require.Len(t, outputs, 2)
	require.JSONEq(t, `{"from":"b"}`, string(outputs[0].Output))
	require.JSONEq(t, `{"from":"c"}`, string(outputs[1].Output))
	mu.Unlock()
	flow, err := runtime.GetJobFlow(ctx, db.Pool, ids[3])
	require.NoError(t, err)
	require.Len(t, flow.Dependents, 2)
	require.Equal(t, []int64{ids[1], ids[2]}, []int64{flow.Dependents[0].ID, flow.Dependents[1].ID})

	// Failure policies.
	withPolicy := func(name, policy string) runtime.WorkflowJob {
		w := step(name, false, "bad")
		w.OnDependencyFailure = policy
		return w
	}
	ids, err = runtime.InsertWorkflow(ctx, db.Pool, []runtime.WorkflowJob{
		step("bad", true),
		withPolicy("dead", ""), withPolicy("cancel", runtime.DependencyFailureCancel), withPolicy("run", runtime.DependencyFailureRun),
		step("after-dead", false, "dead"),
	})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the policies apply", func() bool {
		st, _, _ := jobState(t, db, ids[3])
		s4, _, _ := jobState(t, db, ids[4])
		return st == "completed" && s4 == "dead"
	})
	st, _, lastErr := jobState(t, db, ids[1])
	require.Equal(t, "dead", st)
	require.Contains(t, lastErr, "ended dead")
	st, _, _ = jobState(t, db, ids[2])
	require.Equal(t, "cancelled", st)

	// A graph that is not one is refused, naming the job.
	_, err = runtime.InsertWorkflow(ctx, db.Pool, []runtime.WorkflowJob{step("x", false, "y"), step("y", false, "x")})
	require.ErrorIs(t, err, runtime.ErrWorkflow)
	require.ErrorContains(t, err, `cycle "x" after "y" after "x"`)
	_, err = runtime.InsertWorkflow(ctx, db.Pool, []runtime.WorkflowJob{step("x", false, "nope")})
	require.ErrorContains(t, err, `job "x" comes after "nope", which is not in the workflow`)
	_, err = runtime.Insert(ctx, db.Pool, "step", nil, &runtime.InsertOpts{After: []int64{987654}})
	require.ErrorContains(t, err, "depends on job 987654, which does not exist")
}

// Plain SQL inserts take part in flows as the Go API's do: a dependency
// inserted in the same statement, a sequence, a batch sealed by hand.
func TestFlowsPlainSQL(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var first, second int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
WITH a AS (INSERT INTO fila_jobs (kind) VALUES ('a') RETURNING id)
INSERT INTO fila_jobs (kind, depends_on) SELECT 'b', ARRAY[a.id] FROM a RETURNING id, depends_on[1]`).Scan(&second, &first))
	st, _, _ := jobState(t, db, second)
	require.Equal(t, "waiting", st)
	_, err := db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, first)
	require.NoError(t, err)
	st, _, _ = jobState(t, db, second)
	require.Equal(t, "pending", st)

	var batch int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_batches (callback_kind) VALUES ('report') RETURNING id`).Scan(&batch))
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, batch_id, sequence_key) VALUES ('m', $1, 's'), ('m', $1, 's')`, batch)
	require.NoError(t, err)
	require.Equal(t, 1, countState(t, db, "waiting"))
	_, err = db.Pool.Exec(ctx, `UPDATE fila_batches SET sealed = true WHERE id = $1`, batch)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'dead', finished_at = now() WHERE batch_id = $1 AND state = 'pending'`, batch)
	require.NoError(t, err)
	// Blocked behind the dead one; deleting it lets the sequence go on.
	require.Equal(t, 1, countState(t, db, "waiting"))
	_, err = db.Pool.Exec(ctx, `DELETE FROM fila_jobs WHERE batch_id = $1 AND state = 'dead'`, batch)
	require.NoError(t, err)
	require.Equal(t, 0, countState(t, db, "waiting"))
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE batch_id = $1`, batch)
	require.NoError(t, err)
	b, err := runtime.GetBatch(ctx, db.Pool, batch)
	require.NoError(t, err)
	require.Equal(t, 2, b.Total)
	require.Equal(t, 1, b.Dead)
	require.Equal(t, 1, b.Completed)
	require.NotNil(t, b.CallbackID)
	var payload string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload::text FROM fila_jobs WHERE id = $1`, *b.CallbackID).Scan(&payload))
	require.JSONEq(t, `{"batch":{"id":`+jsonInt(batch)+`,"total":2,"completed":1,"dead":1,"cancelled":0}}`, payload)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A sequence runs one job at a time in insertion order; a retrying job
// keeps its place; a dead one blocks the next unless it says continue.
func TestSequence(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		order   []int
		running int
		most    int
		failed  = map[int]bool{}
	)
	cfg := baseConfig(t, db, runtime.Kind{Name: "seq", Handler: func(ctx context.Context, j *runtime.Job) error {
		var p struct {
			N    int    `json:"n"`
			Mode string `json:"mode"`
		}
		if err := j.Decode(&p); err != nil {
			return err
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a window for an overlap to show
		mu.Lock()
		defer mu.Unlock()
		running--
		switch {
		case p.Mode == "retry" && !failed[p.N]:
			failed[p.N] = true
			return errors.New("once")
		case p.Mode == "die":
			return runtime.Permanent(errors.New("dies"))
		}
		order = append(order, p.N)
		return nil
	}})
	cfg.Concurrency = 10
	start(t, cfg)

	jobs := make([]runtime.InsertParams, 8)
	for i := range jobs {
		mode := ""
		if i == 2 {
			mode = "retry"
		}
		jobs[i] = runtime.InsertParams{Kind: "seq", Payload: map[string]any{"n": i, "mode": mode}, InsertOpts: runtime.InsertOpts{Sequence: "k"}}
	}
	_, err := runtime.InsertMany(ctx, db.Pool, jobs)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the sequence completes", func() bool { return countState(t, db, "completed") == 8 })
	mu.Lock()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
	require.Equal(t, 1, most)
	mu.Unlock()

	dead, err := runtime.Insert(ctx, db.Pool, "seq", map[string]any{"n": 100, "mode": "die"}, &runtime.InsertOpts{Sequence: "d", MaxAttempts: 1})
	require.NoError(t, err)
	blocked, err := runtime.Insert(ctx, db.Pool, "seq", map[string]any{"n": 101}, &runtime.InsertOpts{Sequence: "d"})
	require.NoError(t, err)
	dead2, err := runtime.Insert(ctx, db.Pool, "seq", map[string]any{"n": 200, "mode": "die"}, &runtime.InsertOpts{Sequence: "c", MaxAttempts: 1})
	require.NoError(t, err)
	goesOn, err := runtime.Insert(ctx, db.Pool, "seq", map[string]any{"n": 201}, &runtime.InsertOpts{Sequence: "c", SequenceOnDead: runtime.SequenceDeadContinue})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the dead ones die and the continuing one completes", func() bool {
		s1, _, _ := jobState(t, db, dead)
		s2, _, _ := jobState(t, db, dead2)
		s3, _, _ := jobState(t, db, goesOn)
		return s1 == "dead" && s2 == "dead" && s3 == "completed"
	})
	st, _, _ := jobState(t, db, blocked)
	require.Equal(t, "waiting", st)
	flow, err := runtime.GetJobFlow(ctx, db.Pool, blocked)
	require.NoError(t, err)
	require.Contains(t, flow.WaitReason, "is blocked")
	require.Equal(t, dead, flow.Before.ID)
}

// A batch inserts its callback once, with the counts by outcome.
func TestBatch(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var (
		mu        sync.Mutex
		callbacks []json.RawMessage
	)
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "member", Handler: func(ctx context.Context, j *runtime.Job) error {
			var p struct{ Fail bool }
			if err := j.Decode(&p); err != nil {
				return err
			}
			if p.Fail {
				return runtime.Permanent(errors.New("no"))
			}
			return nil
		}},
		runtime.Kind{Name: "done", Handler: func(ctx context.Context, j *runtime.Job) error {
			mu.Lock()
			callbacks = append(callbacks, j.Payload)
			mu.Unlock()
			return nil
		}})
	cfg.Concurrency = 10
	start(t, cfg)
	jobs := make([]runtime.InsertParams, 20)
	for i := range jobs {
		jobs[i] = runtime.InsertParams{Kind: "member", Payload: map[string]any{"Fail": i%5 == 0}}
	}
	batch, ids, err := runtime.InsertBatch(ctx, db.Pool, jobs, runtime.BatchCallback{Kind: "done", Payload: map[string]any{"report": "r1"}})
	require.NoError(t, err)
	require.Len(t, ids, 20)
	waitFor(t, 30*time.Second, "the callback runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(callbacks) == 1 })
	mu.Lock()
	require.JSONEq(t, `{"report":"r1","batch":{"id":`+jsonInt(batch)+`,"total":20,"completed":16,"dead":4,"cancelled":0}}`, string(callbacks[0]))
	mu.Unlock()
	b, err := runtime.GetBatch(ctx, db.Pool, batch)
	require.NoError(t, err)
	require.Equal(t, 0, b.Unfinished)

	// An empty batch calls back at once.
	empty, _, err := runtime.InsertBatch(ctx, db.Pool, nil, runtime.BatchCallback{Kind: "done"})
	require.NoError(t, err)
	b, err = runtime.GetBatch(ctx, db.Pool, empty)
	require.NoError(t, err)
	require.NotNil(t, b.CallbackID)
	// A sealed batch takes no job.
	_, err = runtime.Insert(ctx, db.Pool, "member", nil, &runtime.InsertOpts{Batch: batch})
	require.ErrorContains(t, err, "which is sealed")
}
