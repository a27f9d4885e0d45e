package fallbackpoll

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(t *testing.T, p *Poller) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitWake(t *testing.T, p *Poller, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-p.Wakes():
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("no wake within %s", within)
		return 0
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

func TestIntervalFollowsHealth(t *testing.T) {
	p, err := New(Config{SafetyPoll: time.Minute, UnhealthyPoll: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, p.Interval(), "unhealthy until told otherwise")
	p.SetHealthy(true)
	require.Equal(t, time.Minute, p.Interval())
	run(t, p)
	p.SetHealthy(false)
	// Losing the wake source wakes at once (notifications may be lost), then
	// polls fast.
	waitWake(t, p, time.Second)
	waitWake(t, p, time.Second)
	require.Equal(t, 50*time.Millisecond, p.Interval())
}

func TestPurePollBacksOffWhileIdleAndResetsOnWork(t *testing.T) {
	p, err := New(Config{PurePoll: true, PollMin: 10 * time.Millisecond, PollMax: 80 * time.Millisecond})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		p.Claimed(0)
	}
	require.InDelta(t, 80*time.Millisecond, p.Interval(), float64(10*time.Millisecond), "idle: capped at PollMax")
	p.Claimed(3)
	require.InDelta(t, 10*time.Millisecond, p.Interval(), float64(3*time.Millisecond), "work found: back to PollMin")
	run(t, p)
	waitWake(t, p, time.Second)
}

func TestDueTimerWakesWithoutPolling(t *testing.T) {
	p, err := New(Config{SafetyPoll: 10 * time.Minute})
	require.NoError(t, err)
	p.SetHealthy(true)
	run(t, p)
	p.SetDue(150*time.Millisecond, true)
	took := waitWake(t, p, 2*time.Second)
	require.GreaterOrEqual(t, took, 140*time.Millisecond)
	// DueWithin only moves the timer earlier.
	p.SetDue(time.Hour, true)
	p.DueWithin(50 * time.Millisecond)
	p.DueWithin(time.Hour)
	waitWake(t, p, time.Second)
	// Cleared: no wake.
	p.SetDue(0, false)
	select {
	case <-p.Wakes():
		t.Fatal("woke with no due time and a 10-minute safety poll")
	case <-time.After(200 * time.Millisecond):
	}
}
