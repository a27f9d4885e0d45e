package ui

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// minute is what the workers did in one minute of the last hour.
type minute struct {
	At        time.Time // the minute's start
	Completed int64
	Failed    int64
	// Timed counts the completions whose pickup latency is known;
	// PickupP50 and PickupP95 (milliseconds) mean something only when it is
	// above zero.
	Timed                int64
	PickupP50, PickupP95 float64
}

// hourOfMinutes is the last hour, minute by minute, and how it was read.
type hourOfMinutes struct {
	Minutes []minute
	// SampledSince is set when the completions were too many to read them
	// all: the figures start at this time, and minutes before it are
	// empty for want of a sample rather than of work.
	SampledSince *time.Time
	// Source says where the figures come from, for the page's caption.
	Source string
}

// completionSample bounds how many completed rows the charts read: the
// newest ones of the last hour, through the partial index on completed
// rows' finished_at, so the charts' cost stays bounded at any throughput.
const completionSample = 20_000

// The charts read the job rows themselves: completions of the last hour
// through fila_jobs_finished_idx (newest first, at most completionSample),
// and deaths through fila_jobs_dead_idx. A completed row's pickup latency is
// its last claim's: started_at minus the later of created_at and run_at.
// Attempts that failed and were retried leave no row of their own, so
// "failed" counts the jobs that died.
const (
	completedMinutesSQL = `WITH recent AS (
    SELECT finished_at, started_at, greatest(created_at, run_at) AS due
    FROM fila_jobs
    WHERE state = 'completed' AND finished_at > $1::timestamptz - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT $2::int
)
SELECT date_trunc('minute', finished_at), count(*), count(started_at), min(finished_at),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due) * 1000), 0)::float8,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - due) * 1000), 0)::float8
FROM recent
GROUP BY 1
ORDER BY 1`

	deadMinutesSQL = `SELECT date_trunc('minute', finished_at), count(*)
FROM fila_jobs
WHERE state = 'dead' AND finished_at > $1::timestamptz - interval '1 hour'
GROUP BY 1`
)

// readMinutes reads the hour up to now, on the database clock.
func readMinutes(ctx context.Context, pool *pgxpool.Pool, now time.Time) (hourOfMinutes, error) {
	h := hourOfMinutes{Source: "completed and dead job rows"}
	byMinute := map[time.Time]*minute{}
	get := func(at time.Time) *minute {
		at = at.UTC()
		m := byMinute[at]
		if m == nil {
			m = &minute{At: at}
			byMinute[at] = m
		}
		return m
	}
	rows, err := pool.Query(ctx, completedMinutesSQL, now, completionSample)
	if err != nil {
		return h, fmt.Errorf("read completions per minute: %w", err)
	}
	var total int64
	var oldest time.Time
	for rows.Next() {
		var (
			at, first time.Time
			n, timed  int64
			p50, p95  float64
		)
		if err := rows.Scan(&at, &n, &timed, &first, &p50, &p95); err != nil {
			rows.Close()
			return h, fmt.Errorf("read completions per minute: %w", err)
		}
		m := get(at)
		m.Completed, m.Timed, m.PickupP50, m.PickupP95 = n, timed, p50, p95
		total += n
		if oldest.IsZero() || first.Before(oldest) {
			oldest = first
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return h, fmt.Errorf("read completions per minute: %w", err)
	}
	if total >= completionSample {
		h.SampledSince = &oldest
		h.Source = fmt.Sprintf("the newest %d completed job rows and the dead ones", completionSample)
	}
	rows, err = pool.Query(ctx, deadMinutesSQL, now)
	if err != nil {
		return h, fmt.Errorf("read deaths per minute: %w", err)
	}
	for rows.Next() {
		var at time.Time
		var n int64
		if err := rows.Scan(&at, &n); err != nil {
			rows.Close()
			return h, fmt.Errorf("read deaths per minute: %w", err)
		}
		get(at).Failed = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return h, fmt.Errorf("read deaths per minute: %w", err)
	}
	h.Minutes = lastHour(byMinute, now)
	return h, nil
}

// lastHour lays the minutes out as the 60 whole minutes before now's and
// now's own, filling the ones with nothing.
func lastHour(byMinute map[time.Time]*minute, now time.Time) []minute {
	end := now.UTC().Truncate(time.Minute)
	out := make([]minute, 0, 61)
	for at := end.Add(-60 * time.Minute); !at.After(end); at = at.Add(time.Minute) {
		if m := byMinute[at]; m != nil {
			out = append(out, *m)
		} else {
			out = append(out, minute{At: at})
		}
	}
	return out
}
