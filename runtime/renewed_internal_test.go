package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Renewed's channel is made by its first call, yet a handler sees what a
// channel made with the job would show: the value of the claim's own
// setting of OwnedUntil, then one value for each renewal (several
// renewals between two reads coalesce into one).
func TestRenewedMadeLazilyShowsTheSame(t *testing.T) {
	t.Parallel()
	received := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	var never Job
	require.False(t, received(never.Renewed()), "a job never owned has had no renewal")

	var j Job
	j.setOwnedUntil(time.Now().Add(time.Minute)) // the claim's own, before the handler runs
	ch := j.Renewed()
	require.Equal(t, ch, j.Renewed(), "one channel for the job")
	require.True(t, received(ch), "the claim's own setting")
	require.False(t, received(ch))
	j.setOwnedUntil(time.Now().Add(2 * time.Minute))
	j.setOwnedUntil(time.Now().Add(3 * time.Minute))
	require.True(t, received(ch), "renewals")
	require.False(t, received(ch), "two renewals between reads coalesce")

	// The first calls racing each other and a renewal agree on one channel.
	var k Job
	k.setOwnedUntil(time.Now())
	var wg sync.WaitGroup
	got := make([]<-chan struct{}, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				k.setOwnedUntil(time.Now().Add(time.Minute))
			}
			got[i] = k.Renewed()
		}()
	}
	wg.Wait()
	for _, c := range got {
		require.Equal(t, got[0], c)
	}
	require.True(t, received(got[0]))
}
