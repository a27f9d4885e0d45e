package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScheduleSlots(t *testing.T) {
	t.Parallel()
	sp, err := time.LoadLocation("America/Sao_Paulo")
	require.NoError(t, err)
	// 09:30 on weekdays in São Paulo (UTC-3) is 12:30 UTC.
	s, err := parseSchedule("30 9 * * 1-5", sp)
	require.NoError(t, err)
	fri := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) // a Friday
	require.Equal(t, time.Date(2026, 11, 27, 12, 30, 0, 0, time.UTC), s.Next(fri).UTC())
	require.Equal(t, time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC), s.Next(fri.Add(time.Hour)).UTC(), "Monday next")

	// @every slots are multiples of the period since the epoch, wherever one
	// starts counting: every process computes the same slots.
	e, err := parseSchedule("@every 30s", time.UTC)
	require.NoError(t, err)
	a := e.Next(time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC))
	b := e.Next(time.Date(2026, 1, 1, 0, 0, 29, 999, time.UTC))
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC), a)
	require.Equal(t, a, b)

	// latestSlot: the last slot after the cursor, at or before now.
	now := time.Date(2026, 1, 1, 10, 17, 5, 0, time.UTC)
	hourly, err := parseSchedule("@hourly", time.UTC)
	require.NoError(t, err)
	got, ok := latestSlot(hourly, now.Add(-5*time.Hour), now)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC), got)
	_, ok = latestSlot(hourly, got, now)
	require.False(t, ok, "nothing due after the slot just handled")
	got, ok = latestSlot(e, now.Add(-24*time.Hour), now)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 1, 1, 10, 17, 0, 0, time.UTC), got)
}
