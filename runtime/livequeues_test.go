package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// claimReasons records, for every job claimed, why its producer claimed.
type claimReasons struct {
	mu     sync.Mutex
	last   map[string]runtime.WakeReason // queue → reason of its last wake
	byJob  map[int64]runtime.WakeReason
	queues map[int64]string
	claims map[string]int // queue → claim statements answered
}

func newClaimReasons() *claimReasons {
	return &claimReasons{last: map[string]runtime.WakeReason{}, byJob: map[int64]runtime.WakeReason{}, queues: map[int64]string{}, claims: map[string]int{}}
}

// Woken keeps the wake that started a run of claims: a claim for a slot
// follows the one before at once.
func (c *claimReasons) Woken(queue string, reason runtime.WakeReason) {
	if reason == runtime.WakeSlot {
		return
	}
	c.mu.Lock()
	c.last[queue] = reason
	c.mu.Unlock()
}

func (c *claimReasons) Claimed(queue string, jobs []*runtime.Job, _ int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims[queue]++
	for _, j := range jobs {
		c.byJob[j.ID] = c.last[queue]
		c.queues[j.ID] = queue
	}
}

func (c *claimReasons) Finished(*runtime.Job, runtime.Outcome, time.Duration) {}

func (c *claimReasons) claimsOf(queue string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims[queue]
}

func (c *claimReasons) reason(id int64) (runtime.WakeReason, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byJob[id], c.queues[id]
}

// gate is a handler that counts the handlers running at once, reports
// each start, and returns once open is closed.
type gate struct {
	running, peak atomic.Int32
	started       chan int64
	open          chan struct{}
}

func newGate() *gate { return &gate{started: make(chan int64, 16), open: make(chan struct{})} }

func (g *gate) handle(ctx context.Context, j *runtime.Job) error {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	g.started <- j.ID
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (g *gate) waitStart(t *testing.T, what string) int64 {
	t.Helper()
	select {
	case id := <-g.started:
		return id
	case <-time.After(20 * time.Second):
		t.Fatalf("not started within 20s: %s", what)
		return 0
	}
}

// A queue added to a running runtime is woken by its notifications (the
// safety poll is a minute away, so only a notification explains a pickup
// within seconds), keeps its own concurrency and counts against
// MaxConcurrency.
func TestAddQueueIsWokenByNotificationAndCapped(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	g := newGate()
	obs := newClaimReasons()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: g.handle})
	cfg.SafetyPoll = time.Minute
	cfg.Concurrency = 2
	cfg.MaxConcurrency = 2
	cfg.Observer = obs
	rt := start(t, cfg)

	first, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	require.Equal(t, first, g.waitStart(t, "the default queue's job"))

	require.NoError(t, rt.AddQueue(ctx, "extra", runtime.QueueConfig{Concurrency: 3}))
	require.Equal(t, []string{"default", "extra"}, rt.Queues())
	// Asleep, the producer claims again only when woken. Once its sleeping
	// row is written it claims once more (what committed before the row is
	// seen then, what commits after is notified): a job inserted before that
	// claim is answered would be taken by it, on the start's poll, so the
	// test waits for both claims, the start's and that one.
	waitFor(t, 20*time.Second, "the added queue's producer asleep", func() bool {
		var asleep bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM fila_sleepers WHERE queue = 'extra')").Scan(&asleep))
		return asleep && obs.claimsOf("extra") >= 2
	})

	inserted := time.Now()
	var extra []int64
	for range 3 {
		id, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "extra"})
		require.NoError(t, err)
		extra = append(extra, id)
	}
	id := g.waitStart(t, "a job of the added queue")
	pickup := time.Since(inserted)
	require.Contains(t, extra, id)
	require.Less(t, pickup, 20*time.Second, "well before the safety poll (1 min)")
	reason, queue := obs.reason(id)
	require.Equal(t, "extra", queue)
	require.Equal(t, runtime.WakeNotify, reason, "claimed on a notification, not a poll")

	// One handler of each queue runs: the added queue's own concurrency (3)
	// would allow two more, MaxConcurrency (2) allows none, so its other
	// jobs stay pending. Its producer waits for a slot of the total before
	// it claims, so none can be running behind the handlers' backs.
	require.Equal(t, 2, rt.Stats().Running)
	require.Equal(t, 2, countState(t, db, "running"))
	require.Equal(t, 2, countState(t, db, "pending"))

	close(g.open)
	waitFor(t, 20*time.Second, "every job completed", func() bool { return countState(t, db, "completed") == 4 })
	require.Equal(t, int32(2), g.peak.Load(), "never more than MaxConcurrency handlers at once")
}

// A removed queue stops claiming at once, while its running job finishes:
// RemoveQueue returns once it has.
func TestRemoveQueueLetsRunningJobFinishAndLeavesNewJobsPending(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	g := newGate()
	marker := make(chan int64, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: g.handle},
		runtime.Kind{Name: "marker", Handler: func(ctx context.Context, j *runtime.Job) error { marker <- j.ID; return nil }})
	cfg.SafetyPoll = time.Minute
	cfg.Queues = []string{"default", "gone"}
	rt := start(t, cfg)

	running, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "gone"})
	require.NoError(t, err)
	require.Equal(t, running, g.waitStart(t, "the job of the queue to remove"))

	removed := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		removed <- rt.RemoveQueue(rctx, "gone")
	}()
	waitFor(t, 20*time.Second, "the queue no longer worked", func() bool {
		return len(rt.Queues()) == 1
	})
	require.Equal(t, []string{"default"}, rt.Queues())

	// A new job of the removed queue, then a marker on the queue still
	// worked: once the marker ran, a producer still claiming from "gone"
	// would have had its notification too.
	late, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "gone"})
	require.NoError(t, err)
	markerID, err := runtime.Insert(ctx, db.Pool, "marker", nil, nil)
	require.NoError(t, err)
	select {
	case got := <-marker:
		require.Equal(t, markerID, got)
	case <-time.After(20 * time.Second):
		t.Fatal("marker not run")
	}
	waitFor(t, 10*time.Second, "marker completed", func() bool { s, _, _ := jobState(t, db, markerID); return s == "completed" })
	s, _, _ := jobState(t, db, late)
	require.Equal(t, "pending", s, "a removed queue's new job is not claimed")
	select {
	case err := <-removed:
		t.Fatalf("RemoveQueue returned while its queue's job still ran: %v", err)
	default:
	}
	require.Equal(t, 1, rt.Stats().Running, "the draining queue's handler still counts")
	require.ErrorContains(t, rt.AddQueue(ctx, "gone", runtime.QueueConfig{}), "its removal still waits for its running handlers")
	s, _, _ = jobState(t, db, running)
	require.Equal(t, "running", s)

	close(g.open)
	select {
	case err := <-removed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("RemoveQueue did not return once its job finished")
	}
	waitFor(t, 10*time.Second, "the running job completed", func() bool { s, _, _ := jobState(t, db, running); return s == "completed" })
	s, _, _ = jobState(t, db, late)
	require.Equal(t, "pending", s)

	// Added again, the queue is worked again: its pending job runs.
	require.NoError(t, rt.AddQueue(ctx, "gone", runtime.QueueConfig{}))
	require.Equal(t, late, g.waitStart(t, "the re-added queue's pending job"))
	waitFor(t, 10*time.Second, "the late job completed", func() bool { s, _, _ := jobState(t, db, late); return s == "completed" })
}

// RemoveQueue's deadline cancels the queue's running handler: its job goes
// back to pending, as at a stop.
func TestRemoveQueueDeadlineCancelsItsHandlers(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	g := newGate()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: g.handle})
	cfg.Queues = []string{"default", "gone"}
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Queue: "gone"})
	require.NoError(t, err)
	require.Equal(t, id, g.waitStart(t, "the job"))

	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, rt.RemoveQueue(rctx, "gone"), context.DeadlineExceeded)
	waitFor(t, 10*time.Second, "the job given back", func() bool { s, _, _ := jobState(t, db, id); return s == "pending" })
	_, attempts, _ := jobState(t, db, id)
	require.Equal(t, 0, attempts, "an attempt stopped by the removal is given back, not counted")
}

func TestAddQueueRemoveQueueRefuseBadInput(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})

	idle, err := runtime.New(cfg)
	require.NoError(t, err)
	require.ErrorIs(t, idle.AddQueue(ctx, "extra", runtime.QueueConfig{}), runtime.ErrNotRunning)
	require.ErrorIs(t, idle.RemoveQueue(ctx, "default"), runtime.ErrNotRunning)

	rt := start(t, cfg)
	require.ErrorContains(t, rt.AddQueue(ctx, "", runtime.QueueConfig{}), "queue name is empty")
	require.ErrorContains(t, rt.AddQueue(ctx, "no spaces", runtime.QueueConfig{}), "may contain only")
	require.ErrorContains(t, rt.AddQueue(ctx, "extra", runtime.QueueConfig{Concurrency: -1}), "Concurrency -1 out of range")
	err = rt.AddQueue(ctx, "default", runtime.QueueConfig{})
	require.ErrorIs(t, err, runtime.ErrQueueExists)
	require.ErrorContains(t, err, `"default"`)
	err = rt.RemoveQueue(ctx, "nope")
	require.ErrorIs(t, err, runtime.ErrUnknownQueue)
	require.ErrorContains(t, err, `"nope"`)
	require.ErrorContains(t, rt.RemoveQueue(ctx, ""), "queue name is empty")
	require.Equal(t, []string{"default"}, rt.Queues(), "nothing refused changed the queues")

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(sctx))
	require.ErrorIs(t, rt.AddQueue(ctx, "extra", runtime.QueueConfig{}), runtime.ErrNotRunning)
}
