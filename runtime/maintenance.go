package runtime

import (
	"context"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// retentionBatch is how many jobs one retention statement deletes.
const retentionBatch = 1000

// maintenanceEvery is the period of the maintenance loop.
const maintenanceEvery = time.Minute

// maintenanceLoop deletes finished jobs past their retention and refreshes
// the worker's row in fila_workers. Retention runs only after this worker
// completed jobs (or once an hour), so an idle worker costs almost no
// queries; when it runs, it deletes until it has caught up, so it keeps up
// with any completion rate.
func (r *Runtime) maintenanceLoop(ctx context.Context) error {
	lastRetention, lastTouch := time.Now(), time.Now()
	for {
		jitter := time.Duration(rand.Int64N(int64(maintenanceEvery / 4)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(maintenanceEvery + jitter):
		}
		r.flushMinutes(ctx)
		if time.Since(lastTouch) >= registryTouchEvery {
			lastTouch = time.Now()
			r.registry.touch(ctx)
		}
		if r.completedSinceRetention.Load() == 0 && time.Since(lastRetention) < time.Hour {
			continue
		}
		r.completedSinceRetention.Store(0)
		lastRetention = time.Now()
		r.retention(ctx, "completed", r.cfg.Retention)
		r.retention(ctx, "dead", r.cfg.DeadRetention)
		r.retention(ctx, "cancelled", r.cfg.DeadRetention)
	}
}

// retention deletes jobs of one finished state older than keep, in batches,
// until none is left.
func (r *Runtime) retention(ctx context.Context, state string, keep time.Duration) {
	if keep < 0 {
		return
	}
	var total int64
	for ctx.Err() == nil {
		n, err := r.store.DeleteFinished(ctx, state, keep, retentionBatch)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("retention failed; will retry", zap.String("state", state), zap.Error(err))
			}
			break
		}
		total += n
		if n < retentionBatch {
			break
		}
	}
	if total > 0 {
		r.log.Info("deleted jobs past retention", zap.String("state", state), zap.Int64("jobs", total),
			zap.Duration("retention", keep))
	}
}

// producer returns the producer of queue, or nil.
func (r *Runtime) producer(queue string) *producer {
	for _, p := range r.producers {
		if p.queue == queue {
			return p
		}
	}
	return nil
}
