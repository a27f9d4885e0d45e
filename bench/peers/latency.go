package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// lostAfter is how long, after the producer's last commit, a job may still
// start before it counts as lost.
const lostAfter = 5 * time.Second

// warmUpTimeout bounds the wait for the warm-up job. gue's default 5 s poll
// is the slowest pickup any mode has.
const warmUpTimeout = 15 * time.Second

// recorder keeps, per sequence number, the time just before the producer's
// COMMIT (t0) and the time the handler began (t1). Both are read from the
// monotonic clock as offsets from one base, in one process, so t1 − t0 is a
// true interval. Offsets are stored plus one so that zero means "not yet".
type recorder struct {
	base      time.Time
	t0        []atomic.Int64
	t1        []atomic.Int64
	committed []atomic.Bool
	started   atomic.Int64 // jobs with a t1
	untimed   atomic.Int64 // handler runs of untimed jobs (the warm-up)
	repeated  atomic.Int64 // handler runs of a timed job after its first
	inserted  atomic.Int64 // jobs committed
	failed    atomic.Int64 // inserts or commits that returned an error

	warmOnce sync.Once
	warm     chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{
		base:      time.Now(),
		t0:        make([]atomic.Int64, n),
		t1:        make([]atomic.Int64, n),
		committed: make([]atomic.Bool, n),
		warm:      make(chan struct{}),
	}
}

func (r *recorder) offset(t time.Time) int64 { return int64(t.Sub(r.base)) + 1 }

// jobStarted is the handlers' startFunc. Only a job's first run counts for
// its latency; a second run is counted as repeated.
func (r *recorder) jobStarted(seq int64, at time.Time) {
	if seq < 0 || seq >= int64(len(r.t1)) {
		r.untimed.Add(1)
		r.warmOnce.Do(func() { close(r.warm) })
		return
	}
	if r.t1[seq].CompareAndSwap(0, r.offset(at)) {
		r.started.Add(1)
	} else {
		r.repeated.Add(1)
	}
}

// result turns what was recorded so far into a LatencyResult: jobs committed
// but not started are lost.
func (r *recorder) result() bench.LatencyResult {
	var res bench.LatencyResult
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

// producersFor picks how many producer goroutines (and connections) a rate
// needs. One insert-and-commit transaction takes a few round trips and an
// fsync; a goroutine can carry a couple of hundred of them a second on a
// busy machine, so one per 100 jobs/s with at least two keeps the producer
// from falling behind its schedule.
func producersFor(rate int) int { return min(max(rate/100, 2), 10) }

// produce inserts n jobs at rate per second, each in its own transaction, open
// loop: a scheduler releases job i at start + i/rate whatever the producers
// are doing, and a slow commit delays the jobs behind it without lowering
// the rate the scheduler asks for. It returns when every job has been
// attempted, with how far behind schedule the last one was committed and
// the rate the producers reached: the jobs committed over the time from the
// first job's due time to the last commit plus one interval, which is the
// asked rate when every commit is on time.
func produce(ctx context.Context, pool *pgxpool.Pool, p peer, rec *recorder, rate, n, producers int, log *zap.Logger) (lag time.Duration, reached float64, err error) {
	due := make(chan int, n) // buffered for every job: the scheduler never waits
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	go func() {
		defer close(due)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for i := 0; i < n; {
			// Release every job whose time has come, then sleep until the next.
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

	var wg sync.WaitGroup
	var lastCommit atomic.Int64
	var firstErr error
	var errOnce sync.Once
	for range producers {
		wg.Go(func() {
			for seq := range due {
				if ctx.Err() != nil {
					continue // drain the channel so the scheduler can finish
				}
				if err := insertOne(ctx, pool, p, rec, seq); err != nil {
					rec.failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					log.Warn("insert failed", zap.Int("seq", seq), zap.Error(err))
					continue
				}
				lastCommit.Store(int64(time.Since(start)))
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if rec.inserted.Load() == 0 && firstErr != nil {
		return 0, 0, fmt.Errorf("no job inserted: %w", firstErr)
	}
	last := time.Duration(lastCommit.Load())
	reached = float64(rec.inserted.Load()) / (last + interval).Seconds()
	scheduled := time.Duration(n-1) * interval
	return last - scheduled, reached, nil
}

// insertOne inserts job seq in a transaction of its own and commits it,
// reading t0 immediately before COMMIT. A negative seq is the untimed warm-up
// job.
func insertOne(ctx context.Context, pool *pgxpool.Pool, p peer, rec *recorder, seq int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := p.insertTx(ctx, tx, int64(seq)); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("insert: %w", err)
	}
	if seq < 0 { // warm-up: not timed
		return tx.Commit(ctx)
	}
	rec.t0[seq].Store(rec.offset(time.Now()))
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	rec.committed[seq].Store(true)
	rec.inserted.Add(1)
	return nil
}

// runLatency measures pickup latency for one peer configuration at one rate,
// n jobs, in a fresh database. Once the jobs are picked up (or lostAfter has
// passed) it stops the workers and checks in SQL that every job the
// handlers started was completed exactly once.
func (r *runner) runLatency(ctx context.Context, s spec, rate, n int) (res bench.LatencyResult, err error) {
	n = max(n, 1)
	duration := time.Duration(n) * time.Second / time.Duration(rate)
	log := r.log.With(zap.String("system", s.system), zap.String("mode", s.mode), zap.Int("rate", rate))

	db, err := r.createDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()

	p := s.new()
	pool, err := db.pool(ctx, p.poolSize())
	if err != nil {
		return res, err
	}
	defer pool.Close()
	producers := producersFor(rate)
	prodPool, err := db.pool(ctx, producers)
	if err != nil {
		return res, err
	}
	defer prodPool.Close()

	rec := newRecorder(n)
	if err := p.setup(ctx, pool, rec.jobStarted); err != nil {
		return res, err
	}
	if err := p.start(ctx); err != nil {
		return res, errors.Join(fmt.Errorf("start: %w", err), stopPeer(ctx, p))
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, stopPeer(ctx, p))
		}
	}()

	// One job through the whole path first, so that connection set-up, LISTEN
	// and leader election are behind us before the clock matters.
	if err := insertOne(ctx, prodPool, p, rec, -1); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	select {
	case <-rec.warm:
	case <-time.After(warmUpTimeout):
		return res, fmt.Errorf("warm-up job not started within %s", warmUpTimeout)
	case <-ctx.Done():
		return res, ctx.Err()
	}

	lag, reached, err := produce(ctx, prodPool, p, rec, rate, n, producers, log)
	if err != nil {
		return res, err
	}
	if lag > duration/10+50*time.Millisecond {
		log.Warn("producers fell behind the target rate; latencies are still per job, but the load was lower",
			zap.Duration("last_commit_late_by", lag), zap.Float64("reached_per_sec", reached))
	}

	deadline := time.Now().Add(lostAfter)
	for rec.started.Load() < rec.inserted.Load() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	res = rec.result()
	res.System, res.Mode, res.RatePerSec, res.AchievedPerSec = s.system, s.mode, rate, reached
	if f := rec.failed.Load(); f > 0 {
		log.Warn("some inserts failed and are not counted", zap.Int64("failed", f))
	}

	stopped = true
	if err := stopPeer(ctx, p); err != nil {
		return res, err
	}
	pool.Close()
	prodPool.Close()
	ran := int(rec.started.Load() + rec.untimed.Load())
	if k := rec.repeated.Load(); k > 0 {
		return res, fmt.Errorf("exactly once: %d handler runs repeated a job that had already started", k)
	}
	if err := r.exactlyOnce(ctx, db, p, ran, res.Lost == 0 && rec.failed.Load() == 0); err != nil {
		return res, err
	}
	return res, nil
}

// stopPeer stops p's workers, giving running handlers 30 s.
func stopPeer(ctx context.Context, p peer) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}
