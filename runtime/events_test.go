package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

// A subscriber sees each outcome of the jobs the runtime runs, with the
// job's id, kind, queue and attempt, once the outcome is written: the row
// read on "completed" is completed, on "retried" pending, on "dead" dead.
func TestEventsReportEachOutcomeAfterItIsWritten(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan int64, 1)
	var snoozes atomic.Int32
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "ok", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }},
		runtime.Kind{Name: "fails", Handler: func(ctx context.Context, j *runtime.Job) error { return errors.New("card declined") }},
		runtime.Kind{Name: "snoozes", Handler: func(ctx context.Context, j *runtime.Job) error {
			if snoozes.Add(1) == 1 {
				return runtime.Snooze(50 * time.Millisecond)
			}
			return nil
		}},
		runtime.Kind{Name: "blocks", Handler: func(ctx context.Context, j *runtime.Job) error {
			started <- j.ID
			<-ctx.Done()
			return ctx.Err()
		}},
	)
	cfg.Queues = []string{"events"}
	cfg.Lease = 3 * time.Second // a heartbeat a second finds the cancellation
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{})
	insert := func(kind string, opts *runtime.InsertOpts) int64 {
		t.Helper()
		if opts == nil {
			opts = &runtime.InsertOpts{}
		}
		opts.Queue = "events"
		id, err := runtime.Insert(ctx, db.Pool, kind, nil, opts)
		require.NoError(t, err)
		return id
	}
	requireState := func(id int64, want string) {
		t.Helper()
		j, err := runtime.GetJob(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, want, j.State, "job %d read on its event", id)
	}

	ok := insert("ok", nil)
	ev := filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, ok))
	requireState(ok, "completed")
	require.Equal(t, "ok", ev.Job.Kind)
	require.Equal(t, "events", ev.Queue)
	require.Equal(t, 1, ev.Job.Attempt)
	require.Positive(t, ev.Ran)
	require.False(t, ev.At.IsZero())

	fails := insert("fails", &runtime.InsertOpts{MaxAttempts: 2})
	ev = filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventRetried, fails))
	// The retry may have started already: the row is no longer running
	// for this attempt, and holds its error.
	j, err := runtime.GetJob(ctx, db.Pool, fails)
	require.NoError(t, err)
	require.Contains(t, j.LastError, "card declined")
	require.Equal(t, 1, ev.Job.Attempt)
	require.Equal(t, "card declined", ev.Error)
	require.True(t, ev.RunAt.After(ev.At), "a retry runs after its backoff")
	ev = filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventDead, fails))
	requireState(fails, "dead")
	require.Equal(t, 2, ev.Job.Attempt)
	require.Equal(t, "card declined", ev.Error)

	snoozed := insert("snoozes", nil)
	ev = filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventSnoozed, snoozed))
	require.Equal(t, "snoozes", ev.Job.Kind)
	require.False(t, ev.RunAt.IsZero())
	filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, snoozed))
	requireState(snoozed, "completed")

	blocks := insert("blocks", nil)
	require.Equal(t, blocks, <-started)
	res, err := runtime.Cancel(ctx, db.Pool, blocks)
	require.NoError(t, err)
	require.Equal(t, []int64{blocks}, res.IDs())
	ev = filatest.WaitForEvent(t, sub, 10*time.Second, filatest.JobEvent(runtime.EventCancelled, blocks))
	requireState(blocks, "cancelled")
	require.Equal(t, "blocks", ev.Job.Kind)
	require.Zero(t, sub.Dropped())
}

// Filters by event kind, job kind and queue deliver only what they name;
// an unfiltered subscription beside them gets everything.
func TestEventFiltersDeliverOnlyWhatTheyName(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	handler := func(ctx context.Context, j *runtime.Job) error {
		if j.Attempt == 1 && string(j.Payload) == `{"fail": true}` {
			return errors.New("first attempt fails")
		}
		return nil
	}
	cfg := baseConfig(t, db, runtime.Kind{Name: "x", Handler: handler}, runtime.Kind{Name: "y", Handler: handler})
	cfg.Queues = []string{"a", "b"}
	rt := start(t, cfg)
	completedInA := filatest.Subscribe(t, rt, runtime.EventFilter{Kinds: []runtime.EventKind{runtime.EventCompleted}, Queues: []string{"a"}})
	ofKindY := filatest.Subscribe(t, rt, runtime.EventFilter{JobKinds: []string{"y"}})
	// Subscribed last, so it gets each event after the others did.
	all := filatest.Subscribe(t, rt, runtime.EventFilter{})

	ids := map[string]int64{}
	for _, k := range []string{"x", "y"} {
		for _, q := range []string{"a", "b"} {
			id, err := runtime.Insert(ctx, db.Pool, k, map[string]bool{"fail": true}, &runtime.InsertOpts{Queue: q})
			require.NoError(t, err)
			ids[k+q] = id
		}
	}
	type seen struct {
		kind runtime.EventKind
		id   int64
	}
	got := map[seen]bool{}
	for len(got) < 8 { // a retry and a completion of each
		ev := filatest.WaitForEvent(t, all, 10*time.Second, func(runtime.Event) bool { return true })
		got[seen{ev.Kind, ev.Job.ID}] = true
	}
	drain := func(sub *runtime.Subscription) map[seen]bool {
		out := map[seen]bool{}
		for {
			select {
			case ev := <-sub.Events():
				out[seen{ev.Kind, ev.Job.ID}] = true
			default:
				return out
			}
		}
	}
	require.Equal(t, map[seen]bool{{runtime.EventCompleted, ids["xa"]}: true, {runtime.EventCompleted, ids["ya"]}: true},
		drain(completedInA))
	require.Equal(t, map[seen]bool{
		{runtime.EventRetried, ids["ya"]}: true, {runtime.EventCompleted, ids["ya"]}: true,
		{runtime.EventRetried, ids["yb"]}: true, {runtime.EventCompleted, ids["yb"]}: true,
	}, drain(ofKindY))
}

// A queue paused and resumed, by anyone, gives a subscriber one event
// each, at the runtime's next safety poll; a filter on another queue's
// events gets none of them.
func TestEventsReportQueuePausedAndResumed(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }})
	cfg.Queues = []string{"watched", "other"}
	cfg.SafetyPoll = runtime.SafetyPollMin
	cfg.UnhealthyPoll = runtime.SafetyPollMin
	rt := start(t, cfg)
	sub := filatest.Subscribe(t, rt, runtime.EventFilter{
		Kinds:  []runtime.EventKind{runtime.EventQueuePaused, runtime.EventQueueResumed, runtime.EventCompleted},
		Queues: []string{"watched"},
	})
	var read []runtime.Event
	waitFor := func(kind runtime.EventKind) {
		t.Helper()
		ev := filatest.WaitForEvent(t, sub, 10*time.Second, func(ev runtime.Event) bool {
			read = append(read, ev)
			return ev.Kind == kind
		})
		require.Equal(t, "watched", ev.Queue)
		require.Nil(t, ev.Job)
	}
	for _, q := range cfg.Queues {
		require.NoError(t, runtime.PauseQueue(ctx, db.Pool, q))
	}
	waitFor(runtime.EventQueuePaused)
	for _, q := range cfg.Queues {
		resumed, err := runtime.ResumeQueue(ctx, db.Pool, q)
		require.NoError(t, err)
		require.True(t, resumed)
	}
	waitFor(runtime.EventQueueResumed)
	for _, ev := range read {
		require.Equal(t, "watched", ev.Queue, "an event of another queue was delivered: %+v", ev)
	}
	kinds := make([]runtime.EventKind, len(read))
	for i, ev := range read {
		kinds[i] = ev.Kind
	}
	require.Equal(t, []runtime.EventKind{runtime.EventQueuePaused, runtime.EventQueueResumed}, kinds)
}

// A subscriber that never reads holds up nothing: 200 jobs complete, and
// the events beyond its buffer are counted as dropped, with one warning
// for the burst. Another, reading,
// finds each job's row completed on its event.
func TestSlowSubscriberDoesNotHoldUpTheWorkers(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }})
	core, logs := observer.New(zapcore.WarnLevel)
	cfg.Logger = zap.New(zapcore.NewTee(cfg.Logger.Core(), core))
	rt := start(t, cfg)
	stuck := filatest.Subscribe(t, rt, runtime.EventFilter{Buffer: 10})
	reader := filatest.Subscribe(t, rt, runtime.EventFilter{Buffer: runtime.EventBufferMax})
	const jobs = 200
	args := make([]runtime.InsertParams, jobs)
	for i := range args {
		args[i] = runtime.InsertParams{Kind: "k"}
	}
	_, err := runtime.InsertMany(ctx, db.Pool, args)
	require.NoError(t, err)
	for range jobs {
		ev := filatest.WaitForEvent(t, reader, 30*time.Second, func(ev runtime.Event) bool { return ev.Kind == runtime.EventCompleted })
		// Written in batches: each event comes after its batch's commit.
		state, _, _ := jobState(t, db, ev.Job.ID)
		require.Equal(t, "completed", state, "job %d read on its event", ev.Job.ID)
	}
	require.Equal(t, jobs, countState(t, db, "completed"))
	require.Len(t, stuck.Events(), 10)
	require.EqualValues(t, jobs-10, stuck.Dropped())
	require.Zero(t, reader.Dropped())
	// One burst of drops, never ended by a read: one warning.
	require.Equal(t, 1, logs.FilterMessageSnippet("buffer is full").Len())
}

// Close closes the subscription's channel, once however often it is
// called; Run's return closes every channel still open, and a Subscribe
// after it fails. A bad filter is refused with a message naming it.
func TestSubscriptionsCloseOnCloseAndWhenRunReturns(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { return nil }})
	rt, err := runtime.New(cfg)
	require.NoError(t, err)

	_, err = rt.Subscribe(runtime.EventFilter{Kinds: []runtime.EventKind{"finished"}})
	require.ErrorContains(t, err, `unknown event kind "finished"`)
	_, err = rt.Subscribe(runtime.EventFilter{Queues: []string{"no spaces"}})
	require.ErrorContains(t, err, "EventFilter.Queues")
	_, err = rt.Subscribe(runtime.EventFilter{JobKinds: []string{""}})
	require.ErrorContains(t, err, "EventFilter.JobKinds: job kind is empty")
	_, err = rt.Subscribe(runtime.EventFilter{Buffer: -1})
	require.ErrorContains(t, err, "EventFilter.Buffer -1 out of range")

	closed, err := rt.Subscribe(runtime.EventFilter{})
	require.NoError(t, err)
	open, err := rt.Subscribe(runtime.EventFilter{})
	require.NoError(t, err)
	closed.Close()
	closed.Close()
	_, more := <-closed.Events()
	require.False(t, more, "the channel of a closed subscription is closed")

	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	<-rt.Ready()
	id, err := runtime.Insert(context.Background(), db.Pool, "k", nil, nil)
	require.NoError(t, err)
	filatest.WaitForEvent(t, open, 10*time.Second, filatest.JobEvent(runtime.EventCompleted, id))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(ctx))
	require.NoError(t, <-errc)
	select {
	case _, more := <-open.Events():
		require.False(t, more, "an event after Run returned")
	case <-time.After(10 * time.Second):
		t.Fatal("Run returned without closing the subscription")
	}
	_, err = rt.Subscribe(runtime.EventFilter{})
	require.ErrorIs(t, err, runtime.ErrClosed)
}
