package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/runtime"
)

// RowLock holds locks on the rows of running jobs, for twice their lease,
// from the application's side, in two ways:
//
//   - an insert into a table with a foreign key to fila_jobs(id), in a
//     transaction left open: PostgreSQL takes FOR KEY SHARE on the job's
//     row, which must not stop heartbeats (FOR NO KEY UPDATE does not
//     conflict with it). The job must complete at its first attempt, its
//     lease never lapsing, with one run — whether its handler ends while
//     the lock is held or after;
//   - SELECT … FOR UPDATE on the job's row: heartbeats cannot renew the
//     lease while it holds, and a heartbeat that finds the row locked is not
//     a renewal, so the handler must be stopped before the lease it had
//     when the lock came expires (the margin), and the run that follows
//     once the lock goes must not overlap it.
//
// Handlers run in-process and honour their context; a second runtime
// joins once every job runs.
func RowLock(ctx context.Context, env *Env, size Size) (*Result, error) {
	const (
		lease = partitionLease
		hold  = 2 * lease
	)
	res := &Result{Load: fmt.Sprintf("3 jobs, locks held %s, lease %s, 2 runtimes", hold, lease)}
	db, err := env.newDatabase(ctx, "rowlock")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	if _, err := db.pool.Exec(ctx, `CREATE TABLE chaos_refs (job_id bigint NOT NULL REFERENCES fila_jobs (id), at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	clk, err := measureClock(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	log := newRunLog()
	started := make(chan int64, 16)
	var firsts sync.Map
	// fk-short ends while its lock is held, fk-long after; update's first
	// run lasts until it is stopped.
	durations := map[string][2]time.Duration{
		"fk-short": {hold - lease/2, hold - lease/2},
		"fk-long":  {hold + lease/2, hold + lease/2},
		"update":   {4 * hold, lease / 6},
	}
	handler := func(worker int) runtime.Handler {
		return func(ctx context.Context, j *runtime.Job) error {
			d := durations[j.Kind][0]
			if _, seen := firsts.LoadOrStore(j.ID, true); seen {
				d = durations[j.Kind][1]
			}
			i := log.begin(j.ID, j.Attempt, worker)
			select {
			case started <- j.ID:
			default:
			}
			select {
			case <-time.After(d):
				log.end(i, true)
				return nil
			case <-ctx.Done():
				log.end(i, false)
				return context.Cause(ctx)
			}
		}
	}
	kinds := func(worker int) []runtime.Kind {
		var ks []runtime.Kind
		for _, k := range []string{"fk-short", "fk-long", "update"} {
			ks = append(ks, runtime.Kind{Name: k, Handler: handler(worker)})
		}
		return ks
	}
	victim, err := startRuntime(ctx, runtime.Config{
		DSN: db.dsn, ListenDSN: db.direct, Concurrency: 3, Lease: lease,
		Kinds: kinds(0), Logger: env.logger().Named("rowlock0"),
	})
	if err != nil {
		return nil, err
	}
	defer victim.stop(10 * time.Second)
	jobIDs := map[string]int64{}
	kindOf := map[int64]string{}
	for _, k := range []string{"fk-short", "fk-long", "update"} {
		var id int64
		if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind) VALUES ($1::text) RETURNING id`, k).Scan(&id); err != nil {
			return nil, err
		}
		jobIDs[k], kindOf[id] = id, k
	}
	// Lock each job's row as soon as its handler starts.
	type lock struct {
		lockedAt, releasedAt time.Time
		leaseAtLock          time.Time // update: the lease the job had when the lock came
		err                  error
	}
	locks := map[int64]*lock{}
	var lockers sync.WaitGroup
	for range 3 {
		var id int64
		select {
		case id = <-started:
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("the jobs did not all start within 30s")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		l := &lock{}
		locks[id] = l
		lockers.Add(1)
		go func() {
			defer lockers.Done()
			l.err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
				if kindOf[id] == "update" {
					var until time.Time
					if err := tx.QueryRow(ctx, `SELECT lease_until FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, id).Scan(&until); err != nil {
						return err
					}
					l.leaseAtLock = clk.local(until)
				} else if _, err := tx.Exec(ctx, `INSERT INTO chaos_refs (job_id) VALUES ($1::bigint)`, id); err != nil {
					return err
				}
				l.lockedAt = wall(time.Now())
				env.progress("job %d (%s) locked for %s", id, kindOf[id], hold)
				return sleepUntil(ctx, l.lockedAt.Add(hold))
			})
			l.releasedAt = wall(time.Now())
		}()
	}
	other, err := startRuntime(ctx, runtime.Config{
		DSN: db.dsn, ListenDSN: db.direct, Concurrency: 3, Lease: lease,
		Kinds: kinds(1), Logger: env.logger().Named("rowlock1"),
	})
	if err != nil {
		return nil, err
	}
	defer other.stop(10 * time.Second)
	// Watch the leases of the jobs under a foreign-key lock: a running job
	// whose lease is in the past has lost it, whoever rescues it.
	lapsed := map[int64]time.Time{}
	settled := waitFor(ctx, 30*time.Second+2*hold, func() bool {
		rows, err := db.pool.Query(ctx, `SELECT id, state, coalesce(lease_until < now(), false) FROM fila_jobs`)
		if err != nil {
			return false
		}
		left := 0
		for rows.Next() {
			var id int64
			var state string
			var expired bool
			if rows.Scan(&id, &state, &expired) != nil {
				continue
			}
			if state != runtime.StateCompleted {
				left++
			}
			if state == runtime.StateRunning && expired && kindOf[id] != "update" {
				if _, ok := lapsed[id]; !ok {
					lapsed[id] = wall(time.Now())
				}
			}
		}
		rows.Close()
		return left == 0
	})
	lockers.Wait()
	res.check(settled, "jobs not completed within %s", 30*time.Second+2*hold)
	for id, l := range locks {
		res.check(l.err == nil, "the lock on job %d (%s) failed: %v", id, kindOf[id], l.err)
	}
	if err := victim.stop(10 * time.Second); err != nil {
		res.check(false, "the first runtime failed: %v", err)
	}
	if err := other.stop(10 * time.Second); err != nil {
		res.check(false, "the second runtime failed: %v", err)
	}
	runs := log.snapshot()
	now := time.Now()
	exps, err := leaseExpiries(ctx, db, clk)
	if err != nil {
		return nil, err
	}
	margins := rescueMargins(runs, exps, now)
	ov := res.overlapping(runs, now)
	res.check(len(ov) == 0, "jobs ran twice at once (worst overlap %s): %s", millis(res.WorstOverlap), ids(ov, 10))
	res.Duplicated = len(okTwice(runs))
	for _, k := range []string{"fk-short", "fk-long", "update"} {
		id := jobIDs[k]
		l := locks[id]
		after, err := readJob(ctx, db, id)
		if err != nil {
			return nil, err
		}
		jr := runsOf(runs, id)
		if after.state != runtime.StateCompleted {
			res.Lost++
			res.check(false, "job %d (%s) ended %s: %s", id, k, after.state, firstLine(after.lastError))
		}
		if k != "update" {
			ended := "while the lock was held"
			if k == "fk-long" {
				ended = "after the lock went"
			}
			at, lost := lapsed[id]
			res.check(!lost, "job %d (FOR KEY SHARE by a foreign-key insert, handler ending %s): its lease lapsed %s after the lock came, while it ran",
				id, ended, at.Sub(l.lockedAt).Round(time.Millisecond))
			res.check(after.attempts == 1 && len(jr) == 1 && jr[0].ok,
				"job %d (FOR KEY SHARE, handler ending %s): completed at attempt %d with %d runs, want its first attempt, one run", id, ended, after.attempts, len(jr))
			continue
		}
		// FOR UPDATE: the first run must end before the lease it had when
		// the lock came.
		if len(jr) == 0 || l.leaseAtLock.IsZero() {
			res.check(false, "job %d (FOR UPDATE): %d runs, lease at the lock %s", id, len(jr), l.leaseAtLock)
			continue
		}
		m := margin{job: id, attempt: jr[0].attempt, worker: jr[0].worker, left: l.leaseAtLock.Sub(jr[0].end)}
		if jr[0].end.IsZero() {
			m.left = l.leaseAtLock.Sub(wall(now))
		}
		margins = append(margins, m)
		res.check(m.left >= 0, "job %d (FOR UPDATE held %s): its handler ran %s past the lease it had when the lock came (heartbeats that find the row locked renew nothing)",
			id, hold, millis(-m.left))
		res.check(len(jr) >= 2 && jr[len(jr)-1].ok, "job %d (FOR UPDATE): no run completed it after the lock went (%d runs)", id, len(jr))
		left := millis(m.left) + " left"
		if m.left < 0 {
			left = "run " + millis(-m.left) + " past"
		}
		res.note("FOR UPDATE held %s on a running job: when its handler ended, the lease it had when the lock came had %s; the job ran again %s after the lock went and completed at attempt %d",
			hold, left, lastStart(jr).Sub(l.releasedAt).Round(time.Millisecond), after.attempts)
	}
	// The margin is taken where the lock made a lease expire.
	var byLock []margin
	for _, m := range margins {
		if kindOf[m.job] == "update" || m.left < 0 {
			byLock = append(byLock, m)
		}
	}
	res.recordMargins(dedupeMargins(byLock))
	res.note("FOR KEY SHARE (an insert into a table with a foreign key to fila_jobs) held %s on two running jobs, one handler ending under the lock, one after: leases lapsed %d, runs %d and %d",
		hold, len(lapsed), len(runsOf(runs, jobIDs["fk-short"])), len(runsOf(runs, jobIDs["fk-long"])))
	return res, nil
}

// lastStart is when the last of runs started.
func lastStart(runs []run) time.Time {
	var t time.Time
	for _, r := range runs {
		if r.start.After(t) {
			t = r.start
		}
	}
	return t
}

// dedupeMargins keeps the smallest margin of each job and attempt.
func dedupeMargins(ms []margin) []margin {
	type key struct {
		job     int64
		attempt int
	}
	best := map[key]int{}
	var out []margin
	for _, m := range ms {
		k := key{m.job, m.attempt}
		if i, ok := best[k]; ok {
			out[i].left = min(out[i].left, m.left)
			continue
		}
		best[k] = len(out)
		out = append(out, m)
	}
	return out
}
