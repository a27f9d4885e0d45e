package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

// errorRecorder is an ErrorHandler that records what it is told.
type errorRecorder struct {
	mu     sync.Mutex
	errs   map[int64][]error
	panics map[int64][]recordedPanic
	// decide, if set, is its answer to HandleError.
	decide func(job *runtime.Job) *runtime.ErrorHandlerResult
}

type recordedPanic struct {
	value any
	stack string
}

func newErrorRecorder() *errorRecorder {
	return &errorRecorder{errs: map[int64][]error{}, panics: map[int64][]recordedPanic{}}
}

func (r *errorRecorder) HandleError(ctx context.Context, job *runtime.Job, err error) *runtime.ErrorHandlerResult {
	r.mu.Lock()
	r.errs[job.ID] = append(r.errs[job.ID], err)
	r.mu.Unlock()
	if r.decide != nil {
		return r.decide(job)
	}
	return nil
}

func (r *errorRecorder) HandlePanic(ctx context.Context, job *runtime.Job, value any, stack []byte) *runtime.ErrorHandlerResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.panics[job.ID] = append(r.panics[job.ID], recordedPanic{value, string(stack)})
	return nil
}

func (r *errorRecorder) calls(id int64) (errs []error, panics []recordedPanic) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs[id]...), append([]recordedPanic(nil), r.panics[id]...)
}

// panicsOnPurpose is a handler whose name the panic's stack must show.
func panicsOnPurpose(context.Context, *runtime.Job) error {
	var m map[string]int
	m["kaboom"]++ // a nil map: a runtime panic
	return nil
}

// The ErrorHandler is called once per failed attempt: HandleError with
// the handler's error, HandlePanic with the panic's value and a stack that
// names the function that panicked, and neither for a success.
func TestErrorHandlerIsToldOfEachFailedAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	declined := errors.New("card declined")
	rec := newErrorRecorder()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "fails", Handler: func(ctx context.Context, j *runtime.Job) error { return declined }},
		runtime.Kind{Name: "panics", Handler: panicsOnPurpose},
		runtime.Kind{Name: "ok", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }},
	)
	cfg.ErrorHandler = rec
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{Kinds: []runtime.EventKind{runtime.EventDead, runtime.EventCompleted}})

	fails, err := runtime.Insert(ctx, db.Pool, "fails", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventDead, fails))
	errs, panics := rec.calls(fails)
	require.Len(t, errs, 2, "once per failed attempt")
	for _, e := range errs {
		require.ErrorIs(t, e, declined)
	}
	require.Empty(t, panics)

	panicked, err := runtime.Insert(ctx, db.Pool, "panics", nil, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventDead, panicked))
	errs, panics = rec.calls(panicked)
	require.Empty(t, errs, "a panic goes to HandlePanic alone")
	require.Len(t, panics, 1)
	require.ErrorContains(t, panics[0].value.(error), "assignment to entry in nil map")
	require.Contains(t, panics[0].stack, "runtime_test.panicsOnPurpose")
	_, _, lastErr := jobState(t, db, panicked)
	require.Contains(t, lastErr, "handler panicked: assignment to entry in nil map")

	ok, err := runtime.Insert(ctx, db.Pool, "ok", nil, nil)
	require.NoError(t, err)
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, ok))
	errs, panics = rec.calls(ok)
	require.Empty(t, errs)
	require.Empty(t, panics)
}

// An ErrorHandler that answers Dead makes the job dead at its first
// failure, attempts left or not.
func TestErrorHandlerCanMakeTheJobDead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rec := newErrorRecorder()
	rec.decide = func(*runtime.Job) *runtime.ErrorHandlerResult { return &runtime.ErrorHandlerResult{Dead: true} }
	cfg := baseConfig(t, db, runtime.Kind{Name: "fails", Handler: func(ctx context.Context, j *runtime.Job) error {
		return errors.New("not worth retrying")
	}})
	cfg.ErrorHandler = rec
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{})
	id, err := runtime.Insert(ctx, db.Pool, "fails", nil, &runtime.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	ev := filatest.WaitForEvent(t, sub, 10*time.Second, func(ev runtime.Event) bool { return ev.Job != nil && ev.Job.ID == id })
	require.Equal(t, runtime.EventDead, ev.Kind)
	state, attempts, _ := jobState(t, db, id)
	require.Equal(t, "dead", state)
	require.Equal(t, 1, attempts)
}

// An ErrorHandler that panics does not kill the worker nor change the
// outcome: the job is retried, and dies at its last attempt, as without
// an ErrorHandler.
func TestPanickingErrorHandlerDoesNotStopTheRetry(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rec := newErrorRecorder()
	rec.decide = func(*runtime.Job) *runtime.ErrorHandlerResult { panic("the error reporter is broken") }
	cfg := baseConfig(t, db, runtime.Kind{Name: "fails", Handler: func(ctx context.Context, j *runtime.Job) error {
		return errors.New("upstream down")
	}})
	cfg.ErrorHandler = rec
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{})
	id, err := runtime.Insert(ctx, db.Pool, "fails", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventRetried, id))
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventDead, id))
	state, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, "dead", state)
	require.Equal(t, 2, attempts)
	require.Contains(t, lastErr, "upstream down")
	errs, _ := rec.calls(id)
	require.Len(t, errs, 2)
}

// The StuckJobHandler is called once for an attempt whose handler runs
// past StuckAfter, however long it runs on, and never for a fast one.
func TestStuckJobHandlerFiresOncePerSlowAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const stuckAfter = 200 * time.Millisecond
	var mu sync.Mutex
	calls := map[int64]int{}
	told := make(chan time.Duration, 10)
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "slow", Handler: func(ctx context.Context, j *runtime.Job) error {
			running := <-told // told it is stuck…
			assert.GreaterOrEqual(t, running, stuckAfter)
			// …and running on for several times StuckAfter more.
			select {
			case <-time.After(4 * stuckAfter):
			case <-ctx.Done():
			}
			return nil
		}},
		runtime.Kind{Name: "fast", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }},
	)
	cfg.StuckAfter = stuckAfter
	cfg.StuckJobHandler = func(ctx context.Context, job *runtime.Job, running time.Duration) {
		mu.Lock()
		calls[job.ID]++
		mu.Unlock()
		told <- running
	}
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{Kinds: []runtime.EventKind{runtime.EventCompleted}})
	fast, err := runtime.Insert(ctx, db.Pool, "fast", nil, nil)
	require.NoError(t, err)
	slow, err := runtime.Insert(ctx, db.Pool, "slow", nil, nil)
	require.NoError(t, err)
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, fast))
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, slow))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[int64]int{slow: 1}, calls)
}

// A StuckJobHandler without StuckAfter, or a negative StuckAfter, is
// refused by New with a message naming the field.
func TestStuckAfterIsValidated(t *testing.T) {
	t.Parallel()
	cfg := runtime.Config{DSN: "postgres://localhost/x", Kinds: []runtime.Kind{{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}}}
	cfg.StuckJobHandler = func(context.Context, *runtime.Job, time.Duration) {}
	_, err := runtime.New(cfg)
	require.ErrorContains(t, err, "StuckJobHandler is set but StuckAfter is 0")
	cfg.StuckAfter = -time.Second
	_, err = runtime.New(cfg)
	require.ErrorContains(t, err, "StuckAfter -1s is negative")
}
