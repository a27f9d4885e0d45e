package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sleep/poll decisions of a notify-mode producer, event by event, with
// the time given: no clock, no database, no timer.
func TestQuietDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	t.Run("the first empty claim tries to sleep; sleeping claims once more", func(t *testing.T) {
		q := newQuiet(200)
		require.Equal(t, quietStep{sleep: true}, q.claimed(at(0), 0, false, false))
		require.Equal(t, quietStep{claimNow: true, stopPoll: true}, q.slept(at(1), true))
		require.True(t, q.asleep)
		// Asleep, only notified claims count, and they do nothing below the rate.
		require.Equal(t, quietStep{}, q.claimed(at(2), 0, false, false))
		require.Equal(t, quietStep{}, q.claimed(at(3), 1, true, true))
	})

	t.Run("more than BusyRate jobs a second on notifications: wake and poll fast", func(t *testing.T) {
		q := newQuiet(3)
		q.claimed(at(0), 0, false, false)
		q.slept(at(0), true)
		for i := range 3 {
			require.Equal(t, quietStep{}, q.claimed(at(100*(i+1)), 1, false, true), "job %d is within the rate", i+1)
		}
		require.Equal(t, quietStep{wake: true}, q.claimed(at(400), 1, false, true), "the fourth in a second is over it")
		require.Equal(t, quietStep{poll: busyPollMin}, q.woke(true))
		require.False(t, q.asleep)
		// A second later the window starts again.
		q2 := newQuiet(3)
		q2.claimed(at(0), 0, false, false)
		q2.slept(at(0), true)
		require.Equal(t, quietStep{}, q2.claimed(at(500), 3, false, true))
		require.Equal(t, quietStep{}, q2.claimed(at(1600), 3, false, true), "a new window")
	})

	t.Run("a wake that fails keeps sleeping (producers keep notifying)", func(t *testing.T) {
		q := newQuiet(0)
		q.claimed(at(0), 0, false, false)
		q.slept(at(0), true)
		require.Equal(t, quietStep{wake: true}, q.claimed(at(1), 1, false, true))
		require.Equal(t, quietStep{}, q.woke(false))
		require.True(t, q.asleep)
	})

	t.Run("polling: work resets to busyPollMin, empty claims double up to busyPollMax, then sleep", func(t *testing.T) {
		q := newQuiet(-1)
		q.asleep, q.empties = false, 0
		require.Equal(t, quietStep{poll: busyPollMin}, q.claimed(at(0), 5, false, false))
		require.Equal(t, quietStep{claimNow: true}, q.claimed(at(1), 5, true, false), "more work: claim at once")
		var polls []time.Duration
		for i := 1; i < busyEmptyPolls; i++ {
			polls = append(polls, q.claimed(at(2+i), 0, false, false).poll)
		}
		require.Equal(t, []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond}, polls)
		require.Equal(t, quietStep{sleep: true}, q.claimed(at(100), 0, false, false), "the sixth empty claim tries to sleep")
		require.Equal(t, quietStep{poll: 64 * time.Millisecond}, q.slept(at(101), false), "refused: poll on, backing off")
		require.Equal(t, quietStep{sleep: true}, q.claimed(at(200), 0, false, false))
		require.Equal(t, quietStep{poll: busyPollMax}, q.slept(at(201), false), "capped at busyPollMax")
	})

	t.Run("a negative BusyRate never wakes a sleeper", func(t *testing.T) {
		q := newQuiet(-1)
		q.claimed(at(0), 0, false, false)
		q.slept(at(0), true)
		for i := range 100 {
			require.Equal(t, quietStep{}, q.claimed(at(i), 1000, false, true))
		}
	})
}

// After a WAL wake whose claim found nothing, the rechecks of walRechecks
// follow one after the other, and work found stops them.
func TestWALRecheckDecisions(t *testing.T) {
	var w walRecheck
	d, stop := w.claimed(false, true, false)
	require.Equal(t, walRechecks[0], d)
	require.False(t, stop)
	d, _ = w.claimed(false, false, true)
	require.Equal(t, walRechecks[1], d)
	d, stop = w.claimed(false, false, true)
	require.Zero(t, d, "no more rechecks")
	require.False(t, stop)
	_, stop = w.claimed(true, true, false)
	require.True(t, stop, "work found stops the rechecks")
	d, _ = w.claimed(false, false, false)
	require.Zero(t, d, "a claim that is neither a WAL wake nor a recheck arms nothing")
}
