package ui

import (
	"context"
	"time"

	"github.com/fila-run/fila/runtime"
)

// minute is what the workers of every queue did in one minute of the last
// hour.
type minute struct {
	At        time.Time // the minute's start
	Completed int64
	Failed    int64 // attempts that failed, retried or dead
	// Pickups counts the jobs claimed; PickupP50 and PickupP95 are the
	// upper bounds of the histogram buckets holding those quantiles, and
	// mean something only when Pickups is above zero.
	Pickups              int64
	PickupP50, PickupP95 time.Duration
}

// hourOfMinutes is the last hour, minute by minute.
type hourOfMinutes struct {
	Minutes []minute
}

// readMinutes reads the hour up to now from fila_minutes, where every
// worker adds what it did every few seconds: a few rows per queue and minute
// whatever the number of jobs, read through the table's primary key, which
// leads with the minute.
func readMinutes(ctx context.Context, db runtime.DB, now time.Time) (hourOfMinutes, error) {
	rows, err := runtime.Minutes(ctx, db, time.Hour)
	if err != nil {
		return hourOfMinutes{}, err
	}
	return hourOfMinutes{Minutes: lastHour(rows, now)}, nil
}

// lastHour sums the queues of each minute and lays the minutes out as the
// 60 whole minutes before now's and now's own, filling the ones in which
// no worker did anything.
func lastHour(rows []runtime.MinuteStats, now time.Time) []minute {
	sums := map[time.Time]*runtime.MinuteStats{}
	for _, r := range rows {
		at := r.Minute.UTC().Truncate(time.Minute)
		s := sums[at]
		if s == nil {
			s = &runtime.MinuteStats{Minute: at, PickupBuckets: make([]int64, len(r.PickupBuckets))}
			sums[at] = s
		}
		s.Completed += r.Completed
		s.Failed += r.Failed
		s.Pickups += r.Pickups
		for i, n := range r.PickupBuckets {
			if i < len(s.PickupBuckets) {
				s.PickupBuckets[i] += n
			}
		}
	}
	end := now.UTC().Truncate(time.Minute)
	out := make([]minute, 0, 61)
	for at := end.Add(-60 * time.Minute); !at.After(end); at = at.Add(time.Minute) {
		m := minute{At: at}
		if s := sums[at]; s != nil {
			m.Completed, m.Failed, m.Pickups = s.Completed, s.Failed, s.Pickups
			m.PickupP50, m.PickupP95 = s.PickupQuantile(0.5), s.PickupQuantile(0.95)
		}
		out = append(out, m)
	}
	return out
}
