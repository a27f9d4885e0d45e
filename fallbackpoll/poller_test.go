package fallbackpoll

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The poller's timers run on synctest's fake clock: a test waits 30 s in no
// time at all, and a wake comes exactly when the poller means it to.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run starts p in the bubble and stops it at the test's end.
func run(t *testing.T, p *Poller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// nextWake returns how long after now p's next wake comes, and why,
// failing after a day of fake time.
func nextWake(t *testing.T, p *Poller) (time.Duration, Reason) {
	t.Helper()
	start := time.Now()
	select {
	case r := <-p.Wakes():
		return time.Since(start), r
	case <-time.After(24 * time.Hour):
		t.Fatal("no wake within a day")
		return 0, ""
	}
}

// noWake fails if p wakes within d.
func noWake(t *testing.T, p *Poller, d time.Duration) {
	t.Helper()
	select {
	case r := <-p.Wakes():
		t.Fatalf("woke (%s) within %s", r, d)
	case <-time.After(d):
	}
}

func TestValidateNamesField(t *testing.T) {
	_, err := New(Config{SafetyPoll: time.Hour})
	require.ErrorContains(t, err, "SafetyPoll")
	_, err = New(Config{SafetyPoll: time.Minute, UnhealthyPoll: 2 * time.Minute})
	require.ErrorContains(t, err, "UnhealthyPoll")
	_, err = New(Config{PollMin: time.Second, PollMax: 10 * time.Millisecond})
	require.NoError(t, err, "PollMax below PollMin is raised to PollMin by WithDefaults")
}

func TestSafetyPollFollowsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{SafetyPoll: 30 * time.Second, UnhealthyPoll: time.Second})
		require.NoError(t, err)
		require.Equal(t, time.Second, p.Interval(), "unhealthy until told otherwise")
		run(t, p)
		d, r := nextWake(t, p)
		require.Equal(t, time.Second, d, "the fast poll while the wake source is down")
		require.Equal(t, ReasonPoll, r)
		p.SetHealthy(true)
		d, _ = nextWake(t, p)
		require.Equal(t, 30*time.Second, d, "the safety poll once it is up")
		// A claim restarts the interval: it looked at the queue already.
		time.Sleep(20 * time.Second)
		p.Claimed(0)
		d, _ = nextWake(t, p)
		require.Equal(t, 30*time.Second, d)
		// Losing the wake source wakes at once (notifications may be lost),
		// then polls fast.
		p.SetHealthy(false)
		d, _ = nextWake(t, p)
		require.Zero(t, d)
		d, _ = nextWake(t, p)
		require.Equal(t, time.Second, d)
	})
}

func TestPurePollBacksOffWhileIdleAndResetsOnWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{PurePoll: true, PollMin: 10 * time.Millisecond, PollMax: 80 * time.Millisecond})
		require.NoError(t, err)
		run(t, p)
		var gaps []time.Duration
		for range 6 {
			d, _ := nextWake(t, p)
			gaps = append(gaps, d)
			p.Claimed(0) // an empty claim: back off
		}
		// Doubling from PollMin, jittered by 10%, capped at PollMax.
		for i, g := range gaps {
			require.LessOrEqual(t, g, 88*time.Millisecond, "gap %d over PollMax and its jitter", i)
			if i > 0 && gaps[i-1] < 40*time.Millisecond {
				require.Greater(t, g, gaps[i-1], "gap %d did not back off: %v", i, gaps)
			}
		}
		require.Greater(t, gaps[len(gaps)-1], 70*time.Millisecond, "idle: at PollMax")
		p.Claimed(3) // work found: back to PollMin
		d, _ := nextWake(t, p)
		require.InDelta(t, 10*time.Millisecond, d, float64(2*time.Millisecond))
	})
}

func TestDueTimerWakesWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{SafetyPoll: 10 * time.Minute})
		require.NoError(t, err)
		p.SetHealthy(true)
		run(t, p)
		p.SetDue(150*time.Millisecond, true)
		d, r := nextWake(t, p)
		require.Equal(t, ReasonDue, r)
		require.Equal(t, 150*time.Millisecond+dueSlack, d, "due, plus the slack for the database clock")
		// DueWithin only moves the timer earlier.
		p.SetDue(time.Hour, true)
		p.DueWithin(50 * time.Millisecond)
		p.DueWithin(time.Hour)
		d, _ = nextWake(t, p)
		require.Equal(t, 50*time.Millisecond+dueSlack, d)
		// A due time in the past wakes after minDue, not in a tight loop.
		p.DueWithin(-time.Second)
		d, _ = nextWake(t, p)
		require.Equal(t, minDue, d)
		// Cleared: nothing until the safety poll.
		p.SetDue(0, false)
		noWake(t, p, 9*time.Minute)
		d, r = nextWake(t, p)
		require.Equal(t, ReasonPoll, r)
		require.LessOrEqual(t, d, time.Minute)
	})
}

func TestTimerOnlyKeepsItsDueTimerAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{SafetyPoll: time.Second, UnhealthyPoll: 10 * time.Millisecond, TimerOnly: true})
		require.NoError(t, err)
		run(t, p)
		p.SetHealthy(false)
		noWake(t, p, time.Hour) // another poller polls: this one never does
		p.DueWithin(time.Minute)
		d, r := nextWake(t, p)
		require.Equal(t, ReasonDue, r)
		require.Equal(t, time.Minute+dueSlack, d)
		p.Wake(ReasonPoll) // the other poller found work for it
		d, r = nextWake(t, p)
		require.Zero(t, d)
		require.Equal(t, ReasonPoll, r)
	})
}
