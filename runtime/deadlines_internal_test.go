package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/fila-run/fila/claimer"
)

// The deadlines of many attempts, with one timer: only an attempt whose
// deadline has passed, whose handler still runs and that was not renewed
// past it is stopped; the timer is then set for the next.
func TestDeadlinesStopOnlyWhatIsDue(t *testing.T) {
	c := &completer{log: zap.NewNop(), owned: map[claimer.AttemptKey]*attempt{}}
	c.timer = time.AfterFunc(time.Hour, func() {})
	c.timer.Stop()
	now := time.Now()
	type tracked struct {
		at  *attempt
		ctx context.Context
	}
	add := func(id int64, stopAt time.Time) tracked {
		job := &Job{ID: id}
		job.ctx.values = context.Background()
		at := &attempt{a: claimer.Attempt{ID: id, Attempt: 1}, job: job, heapIndex: -1, leaseEnd: stopAt.Add(time.Second)}
		ctx := context.Context(&job.ctx)
		c.mu.Lock()
		c.owned[at.a.Key()] = at
		c.watchLocked(at, stopAt)
		c.mu.Unlock()
		return tracked{at: at, ctx: ctx}
	}
	late := add(1, now.Add(time.Hour))
	due := add(2, now.Add(-2*time.Millisecond))
	renewed := add(3, now.Add(-time.Millisecond))
	returned := add(4, now.Add(-3*time.Millisecond))
	dropped := add(5, now.Add(-4*time.Millisecond))
	next := add(6, now.Add(time.Minute))
	require.Equal(t, dropped.at.stopAt, c.timerAt, "the timer is set for the first deadline")

	c.mu.Lock()
	c.watchLocked(renewed.at, now.Add(2*time.Hour)) // a renewal moves it past now
	returned.at.finishing = true                    // its handler returned: no deadline
	c.unwatchLocked(returned.at)
	c.dropLocked(dropped.at.a.Key())
	c.mu.Unlock()
	c.deadlinesDue()

	require.True(t, errors.Is(context.Cause(due.ctx), ErrLeaseDeadline), "the due attempt is stopped")
	require.True(t, due.at.expired)
	for _, tr := range []tracked{late, renewed, returned, dropped, next} {
		require.NoError(t, tr.ctx.Err(), "attempt %d", tr.at.a.ID)
		require.False(t, tr.at.expired, "attempt %d", tr.at.a.ID)
	}
	require.Equal(t, next.at.stopAt, c.timerAt, "the timer is set for the next deadline")
	require.Len(t, c.deadlines, 3)

	// Closed, the completer stops nothing and sets no timer.
	c.mu.Lock()
	c.closed = true
	c.watchLocked(late.at, now.Add(-time.Millisecond))
	c.mu.Unlock()
	c.deadlinesDue()
	require.NoError(t, late.ctx.Err())
	require.True(t, c.timerAt.IsZero())
}

// The heap keeps its order and every entry's index through pushes, removals
// from anywhere and moved deadlines, and gives its entries back in order.
func TestDeadlinesHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	var d deadlines
	var in []*attempt
	check := func() {
		t.Helper()
		for i, at := range d {
			require.Equal(t, i, at.heapIndex, "entry %d's index", i)
			if i > 0 {
				require.False(t, d.less(i, (i-1)/2), "entry %d is earlier than its parent", i)
			}
		}
	}
	for step := 0; step < 5000; step++ {
		switch op := rng.IntN(4); {
		case op <= 1 || len(in) == 0:
			at := &attempt{heapIndex: -1, stopAt: base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)}
			d.push(at)
			in = append(in, at)
		case op == 2:
			k := rng.IntN(len(in))
			at := in[k]
			require.Same(t, at, d.remove(at.heapIndex))
			require.Equal(t, -1, at.heapIndex)
			in = append(in[:k], in[k+1:]...)
		default:
			at := in[rng.IntN(len(in))]
			at.stopAt = base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			d.fix(at.heapIndex)
		}
		check()
	}
	require.Len(t, d, len(in))
	var last time.Time
	for len(d) > 0 {
		at := d.remove(0)
		require.False(t, at.stopAt.Before(last), "taken out of order")
		last = at.stopAt
		check()
	}
}
