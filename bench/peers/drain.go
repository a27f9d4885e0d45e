package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/bench"
)

// drainTimeout bounds one drain: generous, since a stuck drain is a failure
// to report, not a number.
func drainTimeout(jobs int) time.Duration {
	return time.Minute + time.Duration(jobs)*10*time.Millisecond
}

// runDrain inserts jobs no-op jobs with the workers stopped, then starts them
// and times until the database shows every job done.
func (r *runner) runDrain(ctx context.Context, s spec, jobs int) (res bench.ThroughputResult, err error) {
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

	var handled atomic.Int64
	if err := p.setup(ctx, pool, func(int64, time.Time) { handled.Add(1) }); err != nil {
		return res, err
	}
	if err := p.insertMany(ctx, jobs); err != nil {
		return res, fmt.Errorf("batch insert: %w", err)
	}
	if n, err := p.pending(ctx); err != nil {
		return res, fmt.Errorf("count jobs: %w", err)
	} else if n != jobs {
		return res, fmt.Errorf("batch insert left %d jobs, want %d", n, jobs)
	}

	ctx, cancel := context.WithTimeout(ctx, drainTimeout(jobs))
	defer cancel()
	begin := time.Now()
	if err := p.start(ctx); err != nil {
		return res, errors.Join(fmt.Errorf("start: %w", err), stopPeer(ctx, p))
	}
	stopped := false
	defer func() {
		if !stopped {
			err = errors.Join(err, stopPeer(ctx, p))
		}
	}()

	// Watch the in-process counter until every handler has run (this costs
	// the database nothing), then poll the database until it agrees that
	// every job is done: completion writes may trail the handlers.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for handled.Load() < int64(jobs) {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("drain: %d of %d jobs handled: %w", handled.Load(), jobs, ctx.Err())
		case <-tick.C:
		}
	}
	for {
		n, err := p.pending(ctx)
		if err != nil {
			return res, fmt.Errorf("drain: count pending: %w", err)
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("drain: %d jobs still pending: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
	elapsed := time.Since(begin)
	r.log.Debug("drained", zap.String("system", s.system), zap.String("mode", s.mode), zap.Duration("elapsed", elapsed))

	// Untimed: every job ran once, as the database sees it.
	stopped = true
	if err := stopPeer(ctx, p); err != nil {
		return res, err
	}
	pool.Close()
	if h := handled.Load(); h != int64(jobs) {
		return res, fmt.Errorf("exactly once: handlers ran %d times for %d jobs", h, jobs)
	}
	if err := r.exactlyOnce(ctx, db, p, jobs, true); err != nil {
		return res, err
	}
	return bench.ThroughputResult{
		System:     s.system,
		Mode:       s.mode,
		Jobs:       jobs,
		Workers:    s.workers,
		Seconds:    elapsed.Seconds(),
		JobsPerSec: float64(jobs) / elapsed.Seconds(),
	}, nil
}
