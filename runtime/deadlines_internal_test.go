package runtime

import (
	"context"
	"errors"
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
		ctx, cancel := context.WithCancelCause(context.Background())
		at := &attempt{a: claimer.Attempt{ID: id, Attempt: 1}, cancel: cancel, heapIndex: -1, leaseEnd: stopAt.Add(time.Second)}
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
