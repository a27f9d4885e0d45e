package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// PickupBuckets are the upper bounds of the pickup-latency histogram kept in
// fila_minutes: a millisecond or two on the notify path, tens of
// milliseconds to seconds for polls, tens of seconds for a safety poll.
// A last bucket holds everything slower.
var PickupBuckets = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute,
}

// minutesKeep is how long fila_minutes rows are kept.
const minutesKeep = 7 * 24 * time.Hour

const (
	sqlMinutesAdd = `INSERT INTO fila_minutes (minute, queue, worker, completed, failed, pickup_buckets, pickup_sum_ms)
SELECT date_trunc('minute', now()), q, $1::text, c, f, string_to_array(b, ',')::bigint[], s
FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::float8[]) AS t(q, c, f, b, s)
ON CONFLICT (minute, queue, worker) DO UPDATE SET
    completed = fila_minutes.completed + EXCLUDED.completed,
    failed = fila_minutes.failed + EXCLUDED.failed,
    pickup_buckets = ARRAY(SELECT a + b FROM unnest(fila_minutes.pickup_buckets, EXCLUDED.pickup_buckets) AS x(a, b)),
    pickup_sum_ms = fila_minutes.pickup_sum_ms + EXCLUDED.pickup_sum_ms`

	sqlMinutesForget = `DELETE FROM fila_minutes WHERE minute < now() - make_interval(secs => $1::float8)`

	sqlMinutesRead = `SELECT minute, queue, sum(completed)::bigint, sum(failed)::bigint,
    ARRAY(SELECT sum(b)::bigint FROM fila_minutes m2, unnest(m2.pickup_buckets) WITH ORDINALITY AS u(b, i)
          WHERE m2.minute = m.minute AND m2.queue = m.queue GROUP BY i ORDER BY i),
    sum(pickup_sum_ms)::float8
FROM fila_minutes m
WHERE minute >= date_trunc('minute', now() - make_interval(secs => $1::float8))
GROUP BY minute, queue
ORDER BY minute, queue`
)

// minuteCounts is what one queue did since the last flush.
type minuteCounts struct {
	completed, failed int64
	buckets           []int64
	sumMs             float64
}

// rollup is an Observer that counts, per queue, what this worker did, and
// writes it to fila_minutes every maintenance tick (ten seconds) while it has
// something to write.
type rollup struct {
	mu     sync.Mutex
	counts map[string]*minuteCounts
}

func newRollup() *rollup { return &rollup{counts: map[string]*minuteCounts{}} }

func (r *rollup) queue(q string) *minuteCounts {
	c := r.counts[q]
	if c == nil {
		c = &minuteCounts{buckets: make([]int64, len(PickupBuckets)+1)}
		r.counts[q] = c
	}
	return c
}

func (r *rollup) Woken(string, WakeReason) {}

func (r *rollup) Claimed(queue string, jobs []*Job, _ int) {
	if len(jobs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.queue(queue)
	for _, j := range jobs {
		i, _ := slices.BinarySearch(PickupBuckets, j.Wait)
		c.buckets[i]++
		c.sumMs += float64(j.Wait) / float64(time.Millisecond)
	}
}

func (r *rollup) Finished(job *Job, outcome Outcome, _ time.Duration) {
	switch outcome {
	case OutcomeCompleted, OutcomeRetried, OutcomeDead:
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.queue(job.Queue)
	if outcome == OutcomeCompleted {
		c.completed++
	} else {
		c.failed++
	}
}

// take returns the counts since the last take and starts afresh.
func (r *rollup) take() map[string]*minuteCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.counts
	r.counts = map[string]*minuteCounts{}
	return out
}

// flushMinutes writes what the worker did since the last flush; on failure
// the counts are added back, to be written with the next flush.
func (r *Runtime) flushMinutes(ctx context.Context) {
	counts := r.rollup.take()
	if len(counts) == 0 {
		return
	}
	var queues, buckets []string
	var completed, failed []int64
	var sums []float64
	for q, c := range counts {
		queues, completed, failed, sums = append(queues, q), append(completed, c.completed), append(failed, c.failed), append(sums, c.sumMs)
		buckets = append(buckets, joinInts(c.buckets))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.store.Exec(cctx, sqlMinutesAdd, r.registry.id, queues, completed, failed, buckets, sums); err != nil {
		r.log.Warn("cannot write this minute's counts to fila_minutes; they are kept for the next minute", zap.Error(err))
		r.rollup.mu.Lock()
		for q, c := range counts {
			dst := r.rollup.queue(q)
			dst.completed += c.completed
			dst.failed += c.failed
			dst.sumMs += c.sumMs
			for i, n := range c.buckets {
				dst.buckets[i] += n
			}
		}
		r.rollup.mu.Unlock()
	}
}

func joinInts(xs []int64) string {
	b := make([]byte, 0, len(xs)*4)
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", x)
	}
	return string(b)
}

// MinuteStats is what the workers of one queue did in one minute.
type MinuteStats struct {
	Minute    time.Time `json:"minute"`
	Queue     string    `json:"queue"`
	Completed int64     `json:"completed"`
	Failed    int64     `json:"failed"` // attempts retried or dead
	// Pickups counts the jobs claimed; PickupBuckets[i] of them were picked
	// up within PickupBuckets' i-th bound (the last: slower than all).
	Pickups       int64   `json:"pickups"`
	PickupBuckets []int64 `json:"pickup_buckets"`
	PickupMeanMs  float64 `json:"pickup_mean_ms"`
}

// PickupQuantile is the bound of the histogram bucket holding quantile q of
// the minute's pickups (an upper bound on it), or 0 when there were none;
// the slowest bucket reports twice the last bound.
func (m MinuteStats) PickupQuantile(q float64) time.Duration {
	if m.Pickups == 0 {
		return 0
	}
	want := int64(q*float64(m.Pickups) + 0.5)
	want = max(want, 1)
	var seen int64
	for i, n := range m.PickupBuckets {
		seen += n
		if seen >= want {
			if i < len(PickupBuckets) {
				return PickupBuckets[i]
			}
			break
		}
	}
	return 2 * PickupBuckets[len(PickupBuckets)-1]
}

// Minutes reads what the workers did per queue and minute over the last
// span (such as an hour), oldest first. Minutes in which no worker did
// anything have no row.
func Minutes(ctx context.Context, db DB, span time.Duration) ([]MinuteStats, error) {
	rows, err := db.Query(ctx, sqlMinutesRead, span.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read fila_minutes: %w", err)
	}
	defer rows.Close()
	out := []MinuteStats{}
	for rows.Next() {
		var m MinuteStats
		var sum float64
		if err := rows.Scan(&m.Minute, &m.Queue, &m.Completed, &m.Failed, &m.PickupBuckets, &sum); err != nil {
			return nil, fmt.Errorf("read fila_minutes: %w", err)
		}
		for _, n := range m.PickupBuckets {
			m.Pickups += n
		}
		if m.Pickups > 0 {
			m.PickupMeanMs = sum / float64(m.Pickups)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read fila_minutes: %w", err)
	}
	return out, nil
}

// observers tells each of several Observers.
type observers []Observer

func (os observers) Woken(q string, r WakeReason) {
	for _, o := range os {
		o.Woken(q, r)
	}
}

func (os observers) Claimed(q string, jobs []*Job, rescued int) {
	for _, o := range os {
		o.Claimed(q, jobs, rescued)
	}
}

func (os observers) Finished(job *Job, outcome Outcome, ran time.Duration) {
	for _, o := range os {
		o.Finished(job, outcome, ran)
	}
}
