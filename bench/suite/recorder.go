package suite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// lostAfter is how long after the producer's last commit a job may still
// start before it counts as lost.
const lostAfter = 5 * time.Second

// benchKind is the kind of every job the scenarios insert.
const benchKind = "bench"

// recorder keeps, per job, the time just before its producer's COMMIT (t0)
// and the time it was picked up (t1), as offsets on one monotonic clock in
// one process, so t1 − t0 is a true interval. Offsets are stored plus one,
// so zero means "not yet". Jobs are numbered by the order the producer
// releases them; the producer maps each job id to its number before COMMIT,
// which is before anyone can see the job.
type recorder struct {
	base      time.Time
	t0, t1    []atomic.Int64
	committed []atomic.Bool
	inserted  atomic.Int64 // jobs committed
	started   atomic.Int64 // jobs with a t1
	achieved  float64      // commits/s the producers reached; set by produce

	mu  sync.RWMutex
	seq map[int64]int // job id → number; -1 for the warm-up job

	warmOnce sync.Once
	warm     chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{
		base: time.Now(), t0: make([]atomic.Int64, n), t1: make([]atomic.Int64, n),
		committed: make([]atomic.Bool, n), seq: make(map[int64]int, n+1), warm: make(chan struct{}),
	}
}

func (r *recorder) offset(t time.Time) int64 { return int64(t.Sub(r.base)) + 1 }

func (r *recorder) assign(id int64, seq int) {
	r.mu.Lock()
	r.seq[id] = seq
	r.mu.Unlock()
}

// pickedUp records that job id started at t. Only its first pick-up counts;
// ids the recorder does not know are ignored.
func (r *recorder) pickedUp(id int64, t time.Time) {
	r.mu.RLock()
	seq, ok := r.seq[id]
	r.mu.RUnlock()
	switch {
	case !ok:
	case seq < 0:
		r.warmOnce.Do(func() { close(r.warm) })
	case r.t1[seq].CompareAndSwap(0, r.offset(t)):
		r.started.Add(1)
	}
}

// times returns job id's COMMIT and pick-up instants, when both were
// recorded.
func (r *recorder) times(id int64) (t0, t1 time.Time, ok bool) {
	r.mu.RLock()
	seq, known := r.seq[id]
	r.mu.RUnlock()
	if !known || seq < 0 {
		return t0, t1, false
	}
	a, b := r.t0[seq].Load(), r.t1[seq].Load()
	if a == 0 || b == 0 {
		return t0, t1, false
	}
	return r.base.Add(time.Duration(a - 1)), r.base.Add(time.Duration(b - 1)), true
}

// result turns what was recorded into a LatencyResult: jobs committed but
// not started are lost.
func (r *recorder) result(system, mode string, rate int) bench.LatencyResult {
	res := bench.LatencyResult{System: system, Mode: mode, RatePerSec: rate, AchievedPerSec: r.achieved}
	for i := range r.t0 {
		if !r.committed[i].Load() {
			continue
		}
		res.Count++
		t1 := r.t1[i].Load()
		if t1 == 0 {
			res.Lost++
			continue
		}
		res.SamplesMs = append(res.SamplesMs, float64(t1-r.t0[i].Load())/float64(time.Millisecond))
	}
	report.Fill(&res)
	return res
}

// insertOne inserts job seq in a transaction of its own and commits it,
// reading t0 immediately before COMMIT. seq -1 is the untimed warm-up job.
func (r *recorder) insertOne(ctx context.Context, pool *pgxpool.Pool, seq int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	id, err := runtime.InsertTx(ctx, tx, benchKind, nil, nil)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	r.assign(id, seq)
	if seq < 0 {
		return tx.Commit(ctx)
	}
	r.t0[seq].Store(r.offset(time.Now()))
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	r.committed[seq].Store(true)
	r.inserted.Add(1)
	return nil
}

// warmUp sends one job through the whole path, so connections, LISTEN and
// first-use costs are behind us before the clock matters.
func (r *recorder) warmUp(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	if err := r.insertOne(ctx, pool, -1); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	select {
	case <-r.warm:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("warm-up job not picked up within %s", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// producersFor is how many producer goroutines (and connections) a rate
// needs: an insert-and-commit takes three round trips and a WAL flush, a few
// milliseconds on a busy machine, so one producer per 100 jobs/s keeps the
// open loop on schedule.
func producersFor(rate int) int { return min(max(rate/100, 2), 16) }

// produce inserts len(r.t0) jobs at rate per second, each in its own
// transaction, open loop: job i is due at start + i/rate whatever the
// producers are doing, so a slow commit delays the jobs behind it without
// lowering the rate asked for. It returns how late the last commit was, and
// records the rate reached: the jobs committed over the time from the first
// job's due time to the last commit plus one interval, which is the asked
// rate when every commit is on time.
func (r *recorder) produce(ctx context.Context, pool *pgxpool.Pool, rate, producers int, prog *report.Progress) (time.Duration, error) {
	n := len(r.t0)
	due := make(chan int, n) // room for every job: the scheduler never waits
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	go func() {
		defer close(due)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for i := 0; i < n; {
			for ready := int(time.Since(start)/interval) + 1; i < n && i < ready; i++ {
				due <- i
			}
			if i >= n {
				return
			}
			timer.Reset(time.Until(start.Add(time.Duration(i) * interval)))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
	}()
	var (
		wg         sync.WaitGroup
		lastCommit atomic.Int64
		errOnce    sync.Once
		firstErr   error
	)
	for range producers {
		wg.Go(func() {
			for seq := range due {
				if ctx.Err() != nil {
					continue // drain, so the scheduler can finish
				}
				if err := r.insertOne(ctx, pool, seq); err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				lastCommit.Store(int64(time.Since(start)))
				prog.Add(1)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if firstErr != nil {
		return 0, fmt.Errorf("insert: %w", firstErr)
	}
	last := time.Duration(lastCommit.Load())
	if span := last + interval; r.inserted.Load() > 0 {
		r.achieved = float64(r.inserted.Load()) / span.Seconds()
	}
	return last - time.Duration(n-1)*interval, nil
}

// waitPickedUp waits until every committed job was picked up, or lostAfter.
func (r *recorder) waitPickedUp(ctx context.Context) error {
	deadline := time.Now().Add(lostAfter)
	for r.started.Load() < r.inserted.Load() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
