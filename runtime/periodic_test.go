package runtime_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

type tickArgs struct {
	Slot time.Time `json:"slot"`
}

func (tickArgs) Kind() string { return "periodic-tick" }

var workTick = runtime.Work(func(context.Context, *runtime.Job, tickArgs) error { return nil })

// stamping counts the jobs it sees and stamps each one's metadata, so that
// a row shows it went through the middleware.
func stamping(seen *atomic.Int64) runtime.InsertMiddleware {
	return func(next runtime.InsertFunc) runtime.InsertFunc {
		return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
			for _, j := range jobs {
				seen.Add(1)
				md := maps.Clone(j.Metadata)
				if md == nil {
					md = map[string]any{}
				}
				md["stamped"] = true
				j.Metadata = md
			}
			return next(ctx, jobs)
		}
	}
}

func countJobs(t *testing.T, db *testdb.DB, kind string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM fila_jobs WHERE kind = $1::text`, kind).Scan(&n))
	return n
}

// Three runtimes running the same typed task enqueue exactly one job per
// slot, every slot from the first to the last, each built once and seen by
// the insert middleware.
func TestPeriodicJobOneJobPerSlotAcrossRuntimes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var built, seen atomic.Int64
	task := runtime.PeriodicJob("tick", "@every 1s", func(slot time.Time) (tickArgs, *runtime.InsertOpts) {
		built.Add(1)
		return tickArgs{Slot: slot}, nil
	})
	var rts []*runtime.Runtime
	for range 3 {
		cfg := baseConfig(t, db, workTick)
		cfg.Recurring = []runtime.RecurringTask{task}
		cfg.InsertMiddleware = []runtime.InsertMiddleware{stamping(&seen)}
		rts = append(rts, start(t, cfg))
	}
	waitFor(t, 60*time.Second, "six slots enqueued", func() bool { return countJobs(t, db, "periodic-tick") >= 6 })
	for _, rt := range rts {
		require.NoError(t, rt.Stop(ctx))
	}

	rows, err := db.Pool.Query(ctx, `SELECT unique_key, payload->>'slot', metadata->>'stamped',
		count(*) OVER (PARTITION BY unique_key) FROM fila_jobs WHERE kind = 'periodic-tick' ORDER BY unique_key`)
	require.NoError(t, err)
	var slots []time.Time
	for rows.Next() {
		var key, payloadSlot, stamped string
		var perKey int
		require.NoError(t, rows.Scan(&key, &payloadSlot, &stamped, &perKey))
		require.Equal(t, 1, perKey, "slot %s has %d jobs", key, perKey)
		slot, err := time.Parse(time.RFC3339, strings.TrimPrefix(key, "fila:recurring:tick:"))
		require.NoError(t, err, key)
		built, err := time.Parse(time.RFC3339Nano, payloadSlot)
		require.NoError(t, err)
		require.True(t, slot.Equal(built), "the payload was built for its own slot: %s, %s", key, payloadSlot)
		require.Equal(t, "true", stamped, "the insert middleware saw the job of %s", key)
		slots = append(slots, slot)
	}
	require.NoError(t, rows.Err())
	for i := 1; i < len(slots); i++ {
		require.Equal(t, time.Second, slots[i].Sub(slots[i-1]), "no slot missing: %v", slots)
	}
	require.Equal(t, int64(len(slots)), built.Load(), "Construct ran once per slot, across the three runtimes")
	require.Equal(t, int64(len(slots)), seen.Load(), "the middleware saw each slot's insert once")
}

// observed is a logger for a test that also keeps its entries, from Debug.
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

// handledSlot reports whether a runtime's scheduler has handled a slot of
// the task: enqueued its job, or found it enqueued by another.
func handledSlot(logs *observer.ObservedLogs, task string) bool {
	for _, msg := range []string{"enqueued a recurring task's job", "a recurring task's slot has its job already"} {
		if logs.FilterMessage(msg).FilterField(zap.String("task", task)).Len() > 0 {
			return true
		}
	}
	return false
}

// runNow starts a runtime without waiting for it, and stops it when the test
// ends.
func runNow(t *testing.T, cfg runtime.Config) *runtime.Runtime {
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
		require.NoError(t, <-errc)
	})
	return rt
}

// Three runtimes starting at once with a RunOnStart task enqueue its
// current slot once; a fourth started later within the slot enqueues
// nothing.
func TestPeriodicRunOnStartOnceAcrossRuntimes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	hour := func() time.Time {
		var h time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT date_trunc('hour', now())`).Scan(&h))
		return h
	}
	before := hour()
	task := runtime.PeriodicJob("warm", "@every 1h", func(slot time.Time) (tickArgs, *runtime.InsertOpts) {
		return tickArgs{Slot: slot}, nil
	})
	task.RunOnStart = true
	config := func() (runtime.Config, *observer.ObservedLogs) {
		log, logs := observed(t)
		cfg := baseConfig(t, db, workTick)
		cfg.Logger = log
		cfg.Recurring = []runtime.RecurringTask{task}
		return cfg, logs
	}
	var cfgs []runtime.Config
	var logs []*observer.ObservedLogs
	for range 3 {
		cfg, l := config()
		cfgs, logs = append(cfgs, cfg), append(logs, l)
	}
	for _, cfg := range cfgs {
		runNow(t, cfg)
	}
	for i, l := range logs {
		waitFor(t, 60*time.Second, "runtime's first pass", func() bool { return handledSlot(l, "warm") })
		t.Logf("runtime %d handled the slot", i)
	}
	rows, err := db.Pool.Query(ctx, `SELECT unique_key FROM fila_jobs WHERE kind = 'periodic-tick'`)
	require.NoError(t, err)
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	if after := hour(); after.Equal(before) {
		require.Equal(t, []string{"fila:recurring:warm:" + before.UTC().Format(time.RFC3339)}, keys,
			"one job, for the current slot")
	} else {
		require.Len(t, keys, 2, "the hour turned during the test: one job for each slot")
		require.NotEqual(t, keys[0], keys[1])
	}

	// A restart within the slot finds its job.
	cfg, l := config()
	runNow(t, cfg)
	waitFor(t, 60*time.Second, "the fourth runtime's first pass", func() bool { return handledSlot(l, "warm") })
	if hour().Equal(before) {
		require.Equal(t, 1, countJobs(t, db, "periodic-tick"))
		require.Equal(t, 1, l.FilterMessage("a recurring task's slot has its job already").Len())
	}
}

func workerRecurring(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	var names []string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT recurring FROM fila_workers`).Scan(&names))
	return names
}

// A task added to a running runtime is scheduled at once; one removed is
// no longer, while the others go on.
func TestRecurringAddRemoveWhileRunning(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rt := start(t, baseConfig(t, db, workTick, runtime.Kind{Name: "static-tick", Handler: noop}))
	require.Empty(t, rt.RecurringNames())

	added := runtime.PeriodicJob("added", "@every 1s", func(slot time.Time) (tickArgs, *runtime.InsertOpts) {
		return tickArgs{Slot: slot}, nil
	})
	require.NoError(t, rt.AddRecurring(added))
	require.NoError(t, rt.AddRecurring(runtime.RecurringTask{Name: "kept", Schedule: "@every 1s", Kind: "static-tick"}))
	require.ErrorContains(t, rt.AddRecurring(added), `"added" is scheduled already`)
	require.ErrorContains(t, rt.AddRecurring(runtime.RecurringTask{Name: "bad", Schedule: "@every 1s"}), "kind is empty")
	require.Equal(t, []string{"added", "kept"}, rt.RecurringNames())
	waitFor(t, 30*time.Second, "jobs of both added tasks", func() bool {
		return countJobs(t, db, "periodic-tick") >= 2 && countJobs(t, db, "static-tick") >= 1
	})
	waitFor(t, 10*time.Second, "the worker's row lists the tasks", func() bool {
		names := workerRecurring(t, db)
		return len(names) == 2 && names[0] == "added" && names[1] == "kept"
	})

	require.True(t, rt.RemoveRecurring("added"))
	require.False(t, rt.RemoveRecurring("added"), "removed already")
	// The row is written once the scheduler has taken up the removal: no
	// slot of the task is enqueued after that.
	waitFor(t, 10*time.Second, "the worker's row without the removed task", func() bool {
		names := workerRecurring(t, db)
		return len(names) == 1 && names[0] == "kept"
	})
	n, k := countJobs(t, db, "periodic-tick"), countJobs(t, db, "static-tick")
	waitFor(t, 30*time.Second, "three more slots of the kept task", func() bool { return countJobs(t, db, "static-tick") >= k+3 })
	require.Equal(t, n, countJobs(t, db, "periodic-tick"), "no job of the removed task")

	tasks, err := runtime.RecurringTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Equal(t, "added", tasks[0].Name)
	require.True(t, tasks[0].Orphaned, "no worker schedules the removed task")
	require.Equal(t, "periodic-tick", tasks[0].Kind)
	require.Equal(t, "kept", tasks[1].Name)
	require.Equal(t, 1, tasks[1].Schedulers)
	deleted, err := runtime.DeleteRecurringTask(ctx, db.Pool, "added")
	require.NoError(t, err)
	require.True(t, deleted)
}

type reportArgs struct {
	Slot time.Time `json:"slot"`
}

func (reportArgs) Kind() string { return "periodic-report" }

func (reportArgs) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "reports", MaxAttempts: 3, Tags: []string{"from-type"}, Metadata: map[string]any{"type": 1}}
}

type singleArgs struct{}

func (singleArgs) Kind() string { return "periodic-single" }

type neverArgs struct{}

func (*neverArgs) Kind() string { return "periodic-never" }

type jobRow struct {
	Queue        string
	Priority     int16
	MaxAttempts  int
	Tags         []string
	Metadata     map[string]any
	Payload      map[string]any
	UniqueKey    string
	UniqueStates []string
}

func lastJobOf(t *testing.T, db *testdb.DB, kind string) jobRow {
	t.Helper()
	var r jobRow
	var md, payload []byte
	var states []string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT queue, priority, max_attempts, tags, metadata::text,
		payload::text, unique_key, coalesce(unique_states, '{}') FROM fila_jobs WHERE kind = $1::text ORDER BY id DESC LIMIT 1`, kind).
		Scan(&r.Queue, &r.Priority, &r.MaxAttempts, &r.Tags, &md, &payload, &r.UniqueKey, &states))
	require.NoError(t, json.Unmarshal(md, &r.Metadata))
	require.NoError(t, json.Unmarshal(payload, &r.Payload))
	r.UniqueStates = states
	return r
}

// A task's options reach its job's row: the args' type's defaults under the
// task's, under Construct's; a task with a UniqueKey enqueues nothing while
// its job is pending; a Construct returning nil skips the slot.
func TestPeriodicJobOptionsApplied(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	report := runtime.PeriodicJob("report", "@every 1s", func(slot time.Time) (reportArgs, *runtime.InsertOpts) {
		return reportArgs{Slot: slot}, &runtime.InsertOpts{Priority: 7, Metadata: map[string]any{"built": true}}
	})
	report.Priority, report.Tags = 2, []string{"task-tag"}
	static := runtime.RecurringTask{Name: "static", Schedule: "@every 1s", Kind: "periodic-static", Payload: map[string]int{"n": 1},
		Queue: "reports", MaxAttempts: 4, Priority: -1, Tags: []string{"static"}, Metadata: map[string]any{"m": "x"}}
	single := runtime.PeriodicJob("single", "@every 1s", func(time.Time) (singleArgs, *runtime.InsertOpts) { return singleArgs{}, nil })
	single.UniqueKey = "single" // while pending or running
	never := runtime.PeriodicJob("never", "@every 1s", func(time.Time) (*neverArgs, *runtime.InsertOpts) { return nil, nil })
	var seen atomic.Int64
	// This runtime works none of these kinds: their jobs stay pending.
	cfg := baseConfig(t, db, runtime.Kind{Name: "unrelated", Handler: noop})
	cfg.Recurring = []runtime.RecurringTask{report, static, single, never}
	cfg.InsertMiddleware = []runtime.InsertMiddleware{stamping(&seen)}
	start(t, cfg)

	waitFor(t, 60*time.Second, "jobs of report and static, and two slots of single after its job", func() bool {
		var singleAhead, neverHandled bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
			coalesce((SELECT r.last_slot > j.created_at + interval '2 seconds' FROM fila_recurring r
				JOIN fila_jobs j ON j.id = r.last_job_id WHERE r.task = 'single'), false),
			coalesce((SELECT last_slot IS NOT NULL FROM fila_recurring WHERE task = 'never'), false)`).Scan(&singleAhead, &neverHandled))
		return singleAhead && neverHandled && countJobs(t, db, "periodic-report") >= 1 && countJobs(t, db, "periodic-static") >= 1
	})

	r := lastJobOf(t, db, "periodic-report")
	require.Equal(t, "reports", r.Queue, "the type's queue")
	require.Equal(t, int16(7), r.Priority, "Construct's priority over the task's")
	require.Equal(t, 3, r.MaxAttempts, "the type's max attempts")
	require.Equal(t, []string{"task-tag"}, r.Tags, "the task's tags over the type's")
	require.Equal(t, map[string]any{"type": 1.0, "built": true, "stamped": true}, r.Metadata, "metadata merged, then stamped")
	require.Contains(t, r.Payload, "slot")
	slot, err := time.Parse(time.RFC3339Nano, r.Payload["slot"].(string))
	require.NoError(t, err)
	require.Equal(t, "fila:recurring:report:"+slot.UTC().Format(time.RFC3339), r.UniqueKey)
	require.ElementsMatch(t, []string{"pending", "running", "completed", "dead", "cancelled"}, r.UniqueStates)

	s := lastJobOf(t, db, "periodic-static")
	require.Equal(t, jobRow{Queue: "reports", Priority: -1, MaxAttempts: 4, Tags: []string{"static"},
		Metadata: map[string]any{"m": "x", "stamped": true}, Payload: map[string]any{"n": 1.0},
		UniqueKey: s.UniqueKey, UniqueStates: s.UniqueStates}, s)
	require.True(t, strings.HasPrefix(s.UniqueKey, "fila:recurring:static:"), s.UniqueKey)

	require.Equal(t, 1, countJobs(t, db, "periodic-single"), "no second job while the first is pending")
	u := lastJobOf(t, db, "periodic-single")
	require.Equal(t, "single", u.UniqueKey)
	require.Empty(t, u.UniqueStates, "the default states: pending and running")
	require.Zero(t, countJobs(t, db, "periodic-never"), "a nil args skips the slot")

	tasks, err := runtime.RecurringTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, tasks, 4)
	require.Equal(t, "report", tasks[1].Name)
	require.Equal(t, "reports", tasks[1].Queue)
	require.Equal(t, "periodic-report", tasks[1].Kind)
	require.Contains(t, string(tasks[1].Payload), "slot", "the last slot's payload")
	require.Greater(t, seen.Load(), int64(2))
}

func TestPeriodicJobValidation(t *testing.T) {
	t.Parallel()
	base := runtime.Config{DSN: "postgres://localhost/x", Kinds: []runtime.Kind{{Name: "k", Handler: noop}}}
	build := func(time.Time) (runtime.JobArgs, *runtime.InsertOpts) { return tickArgs{}, nil }
	for name, tc := range map[string]struct {
		task runtime.RecurringTask
		want string
	}{
		"construct and payload": {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", Payload: 1, Construct: build}, "both a Payload and Construct"},
		"construct no kind":     {runtime.RecurringTask{Name: "a", Schedule: "@daily", Construct: build}, "no Kind"},
		"nil construct":         {runtime.PeriodicJob[tickArgs]("a", "@daily", nil), "nil construct"},
		"bad tag":               {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", Tags: []string{""}}, "tag"},
		"states without key":    {runtime.RecurringTask{Name: "a", Schedule: "@daily", Kind: "k", UniqueStates: []string{"pending"}}, "without a UniqueKey"},
		"bad schedule":          {runtime.PeriodicJob("a", "@every 0s", func(time.Time) (tickArgs, *runtime.InsertOpts) { return tickArgs{}, nil }), "whole number of seconds"},
		"typed":                 {runtime.PeriodicJob("a", "@every 1s", func(time.Time) (tickArgs, *runtime.InsertOpts) { return tickArgs{}, nil }), ""},
	} {
		cfg := base
		cfg.Recurring = []runtime.RecurringTask{tc.task}
		_, err := runtime.New(cfg)
		if tc.want == "" {
			require.NoError(t, err, name)
			continue
		}
		require.ErrorContains(t, err, "Recurring", name)
		require.ErrorContains(t, err, tc.want, name)
	}
	cfg := base
	cfg.InsertMiddleware = []runtime.InsertMiddleware{nil}
	_, err := runtime.New(cfg)
	require.ErrorContains(t, err, "InsertMiddleware[0] is nil")
}

// A Construct that panics enqueues nothing and claims no slot; it is
// logged and tried again, and the other tasks go on.
func TestPeriodicJobConstructPanicIsRetried(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var calls atomic.Int64
	boom := runtime.PeriodicJob("boom", "@every 1s", func(time.Time) (tickArgs, *runtime.InsertOpts) {
		calls.Add(1)
		panic("no args today")
	})
	log, logs := observed(t)
	cfg := baseConfig(t, db, workTick, runtime.Kind{Name: "static-tick", Handler: noop})
	cfg.Logger = log
	cfg.Recurring = []runtime.RecurringTask{boom, {Name: "ok", Schedule: "@every 1s", Kind: "static-tick"}}
	start(t, cfg)
	waitFor(t, 30*time.Second, "two slots of the other task, Construct called twice", func() bool {
		return countJobs(t, db, "static-tick") >= 2 && calls.Load() >= 2
	})
	require.Zero(t, countJobs(t, db, "periodic-tick"))
	var claimed bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_slot IS NOT NULL FROM fila_recurring WHERE task = 'boom'`).Scan(&claimed))
	require.False(t, claimed, "the slot's claim rolled back with the failed insert")
	failed := logs.FilterMessage("cannot enqueue a recurring task's job; will retry").FilterField(zap.String("task", "boom")).All()
	require.NotEmpty(t, failed)
	require.Contains(t, failed[0].ContextMap()["error"], "Construct panicked: no args today")
}
