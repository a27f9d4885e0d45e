package runtime

import (
	"context"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// retentionBatch is how many jobs one retention statement deletes.
const retentionBatch = 1000

// maintenanceTick is the period of the maintenance loop. A tick costs no
// statement unless there is work: counts to write, jobs to delete, churn
// to vacuum. maintenanceEvery is how often retention runs after this
// worker completed jobs; maintenanceBusy, how often while retention finds
// whole batches to delete, so that under sustained load the table holds
// little more than its retention's worth of jobs.
const (
	maintenanceTick  = 10 * time.Second
	maintenanceEvery = time.Minute
	maintenanceBusy  = maintenanceTick
)

// vacuumAfter is how many jobs this worker must have completed or deleted
// since its last VACUUM of fila_jobs before it runs another. Every job
// leaves three dead row versions behind (claim, outcome, retention), and
// autovacuum looks at a table at most once per autovacuum_naptime (a minute
// by default): under sustained load the table and its indexes would swell
// between its visits, and every claim read through the dead entries.
const vacuumAfter = 10000

// sqlVacuum vacuums the jobs table, skipping it if another VACUUM (or
// autovacuum) holds it: one of them is enough.
const sqlVacuum = `VACUUM (SKIP_LOCKED) fila_jobs`

// sqlOwnsJobs says whether the worker's role may vacuum fila_jobs: only its
// owner (or a member of the owner's role) may.
const sqlOwnsJobs = `SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = 'fila_jobs'::regclass`

// maintenanceLoop deletes finished jobs past their retention, vacuums the
// table after churn, writes this worker's per-minute counts and forgets
// the rows of workers gone for long. Retention runs only after this worker completed
// jobs (or once an hour), so an idle worker costs almost no queries; when
// it runs, it deletes until it has caught up, so it keeps up with any
// completion rate. The churn is checked every tick, so a worker that starts
// on a busy queue vacuums within seconds, not after the first minute of
// dead row versions has piled up in the pending index every claim reads.
func (r *Runtime) maintenanceLoop(ctx context.Context) error {
	lastRetention, lastTouch := time.Now(), time.Now()
	retentionEvery := maintenanceEvery
	var (
		churn     int64 // jobs completed and deleted since this worker's last VACUUM
		undeleted int64 // jobs completed since the last retention pass
	)
	canVacuum := r.mayVacuum(ctx)
	for {
		jitter := time.Duration(rand.Int64N(int64(maintenanceTick / 4)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(maintenanceTick + jitter):
		}
		r.flushMinutes(ctx)
		if time.Since(lastTouch) >= registryTouchEvery {
			lastTouch = time.Now()
			r.registry.touch(ctx)
		}
		completed := r.completedSinceRetention.Swap(0)
		churn += completed
		undeleted += completed
		if (undeleted > 0 && time.Since(lastRetention) >= retentionEvery) || time.Since(lastRetention) >= time.Hour {
			undeleted = 0
			lastRetention = time.Now()
			deleted := r.retention(ctx, StateCompleted, r.cfg.Retention)
			deleted += r.retention(ctx, StateDead, r.cfg.DeadRetention)
			deleted += r.retention(ctx, StateCancelled, r.cfg.DeadRetention)
			if len(r.rates) > 0 {
				r.rateRetention(ctx)
			}
			churn += deleted
			retentionEvery = maintenanceEvery
			if deleted >= retentionBatch {
				retentionEvery = maintenanceBusy
			}
		}
		if canVacuum && churn >= vacuumAfter {
			churn = 0
			r.vacuum(ctx)
		}
	}
}

// mayVacuum reports whether this worker's role may vacuum fila_jobs.
func (r *Runtime) mayVacuum(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var owns bool
	if err := r.store.QueryRow(cctx, sqlOwnsJobs, nil, &owns); err != nil {
		return false
	}
	if !owns {
		r.log.Info("this worker's role does not own fila_jobs, so it leaves vacuuming to autovacuum; under sustained load, lower autovacuum_naptime")
	}
	return owns
}

// vacuum vacuums fila_jobs, so dead row versions and index entries go soon
// after retention, not at autovacuum's next visit.
func (r *Runtime) vacuum(ctx context.Context) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := r.control.Exec(cctx, sqlVacuum); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("vacuum of fila_jobs failed; autovacuum remains", zap.Error(err))
		}
		return
	}
	r.log.Info("vacuumed fila_jobs", zap.Duration("took", time.Since(start)))
}

// retention deletes jobs of one finished state older than keep, in batches,
// until none is left, and returns how many it deleted.
func (r *Runtime) retention(ctx context.Context, state string, keep time.Duration) int64 {
	if keep < 0 {
		return 0
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
	return total
}

// rateRetention deletes the starts of rate-limited kinds no claim counts
// any more, in batches, until none is left.
func (r *Runtime) rateRetention(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.store.DeleteRateStarts(ctx, retentionBatch)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("deleting past rate-limit starts failed; will retry", zap.Error(err))
			}
			return
		}
		if n < retentionBatch {
			return
		}
	}
}

// producer returns the producer of queue, or nil.
func (r *Runtime) producer(queue string) *producer {
	for _, p := range r.producerList() {
		if p.queue == queue {
			return p
		}
	}
	return nil
}
