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

	// The latest slot after the cursor, at or before now.
	now := time.Date(2026, 1, 1, 10, 17, 5, 0, time.UTC)
	hourly, err := parseSchedule("@hourly", time.UTC)
	require.NoError(t, err)
	got := dueSlots(hourly, now.Add(-5*time.Hour), now, 1)
	require.Equal(t, []time.Time{time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}, got)
	require.Empty(t, dueSlots(hourly, got[0], now, 1), "nothing due after the slot just handled")
	got = dueSlots(e, now.Add(-24*time.Hour), now, 1)
	require.Equal(t, []time.Time{time.Date(2026, 1, 1, 10, 17, 0, 0, time.UTC)}, got)
}

func TestDueSlots(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC)
	e, err := parseSchedule("@every 1s", time.UTC)
	require.NoError(t, err)
	got := dueSlots(e, now.Add(-3*time.Second), now, 60)
	require.Equal(t, []time.Time{now.Add(-2 * time.Second).Truncate(time.Second), now.Add(-time.Second).Truncate(time.Second), now.Truncate(time.Second)}, got,
		"every slot a stall of three seconds missed, oldest first")
	got = dueSlots(e, now.Add(-time.Hour), now, 60)
	require.Len(t, got, 60, "at most the latest 60")
	require.Equal(t, now.Truncate(time.Second), got[59])
	require.Empty(t, dueSlots(e, now.Truncate(time.Second), now, 60))
	hourly, err := parseSchedule("@hourly", time.UTC)
	require.NoError(t, err)
	got = dueSlots(hourly, now.Add(-3*time.Hour-time.Minute), now, 2)
	require.Equal(t, []time.Time{now.Add(-time.Hour).Truncate(time.Hour), now.Truncate(time.Hour)}, got)
}
