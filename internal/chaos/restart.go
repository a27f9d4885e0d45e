package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/fila-run/fila/internal/pgcluster"
)

// drainLease is the lease of the drain scenarios' runtimes: longer than a
// restart takes, so a worker's results written after the server is back
// are still its own, and short enough that a job whose claim was committed
// but never answered comes back quickly.
const drainLease = 5 * time.Second

// drainConcurrency is each drain runtime's handler slots.
const drainConcurrency = 8

// RestartPostgresFast restarts PostgreSQL (fast shutdown: clients are
// disconnected, the server checkpoints and exits) while Size.Workers
// runtimes drain Size.Jobs jobs. Each handler records its effect and
// completes its job in one transaction. Afterwards every job is completed,
// every effect is recorded exactly once, no two runs of a job overlapped,
// and every runtime recovered on its own: a claim of its succeeded after
// the fault was over (jobs may all have run by then).
func RestartPostgresFast(ctx context.Context, env *Env, size Size) (*Result, error) {
	return restartPostgres(ctx, env, size, pgcluster.ModeFast)
}

// RestartPostgresImmediate is RestartPostgresFast with an immediate
// shutdown: the server quits at once and runs crash recovery when it starts.
func RestartPostgresImmediate(ctx context.Context, env *Env, size Size) (*Result, error) {
	return restartPostgres(ctx, env, size, pgcluster.ModeImmediate)
}

func restartPostgres(ctx context.Context, env *Env, size Size, mode string) (*Result, error) {
	if err := env.need(true, false, false); err != nil {
		return nil, err
	}
	return env.faultyDrain(ctx, size, "pgrestart", func(db *database) (string, func(context.Context) error) {
		return db.dsn, func(ctx context.Context) error { return env.Cluster.Restart(ctx, mode) }
	})
}

// RestartPgBouncer kills the PgBouncer the runtimes' main DSNs go through
// (SIGKILL: every client connection breaks) and starts it again, during a
// drain, with the same checks as RestartPostgresFast.
func RestartPgBouncer(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, true, false); err != nil {
		return nil, err
	}
	return env.faultyDrain(ctx, size, "bouncer", func(db *database) (string, func(context.Context) error) {
		return db.via(env.Bouncer.DSN("postgres")), func(ctx context.Context) error { return env.Bouncer.Restart(ctx) }
	})
}

func (e *Env) faultyDrain(ctx context.Context, size Size, name string,
	setup func(db *database) (mainDSN string, fault func(context.Context) error)) (*Result, error) {
	res := &Result{Load: fmt.Sprintf("%d jobs, %d runtimes × %d", size.Jobs, size.Workers, drainConcurrency)}
	db, err := e.newDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	mainDSN, fault := setup(db)
	out, err := e.drain(ctx, db, drainSpec{
		jobs: size.Jobs, workers: size.Workers, concurrency: drainConcurrency, lease: drainLease,
		inTx: true, mainDSN: mainDSN, listenDSN: db.direct,
		faultAt: 0.3, fault: fault, sampleLocks: true,
	})
	if err != nil {
		return nil, err
	}
	out.judge(res, size.Jobs, true)
	for i, ok := range out.claimedAfter {
		res.check(ok, "runtime %d made no claim after the fault: it did not recover", i)
	}
	if len(out.lockWaits) > 0 {
		res.note("row-lock waits seen in two samples 20 ms apart: %d (first: %s)", len(out.lockWaits), out.lockWaits[0])
	}
	return res, nil
}

// LockWaits drains Size.Jobs jobs with Size.Workers runtimes and no fault,
// sampling pg_stat_activity every 20 ms for sessions waiting on a row lock
// (a wait seen in two samples in a row counts). Every statement of Fila's
// takes its rows with SKIP LOCKED, but PostgreSQL still waits when it
// follows the update chain of a row whose claim committed during the lock
// attempt: such a wait lasts at most one of Fila's single statements. No
// session may wait on anything else (a transaction that may last), and
// every job runs exactly once.
func LockWaits(ctx context.Context, env *Env, size Size) (*Result, error) {
	res := &Result{Load: fmt.Sprintf("%d jobs, %d runtimes × %d", size.Jobs, size.Workers, drainConcurrency)}
	db, err := env.newDatabase(ctx, "locks")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	out, err := env.drain(ctx, db, drainSpec{
		jobs: size.Jobs, workers: size.Workers, concurrency: drainConcurrency, lease: drainLease,
		mainDSN: db.dsn, listenDSN: db.direct, sampleLocks: true,
	})
	if err != nil {
		return nil, err
	}
	out.judge(res, size.Jobs, true)
	var bounded []lockWait
	for _, w := range out.lockWaits {
		if w.bounded {
			bounded = append(bounded, w)
		} else {
			res.check(false, "a session waited on a row lock held by a transaction that may last: %s", w)
		}
	}
	res.note("row-lock waits seen in two samples 20 ms apart: %d", len(out.lockWaits))
	if len(bounded) > 0 {
		res.note("%d of them behind another of Fila's single-statement transactions, for at most that statement "+
			"(PostgreSQL follows the update chain of a row whose claim committed during the lock attempt, and waits there "+
			"despite SKIP LOCKED); first: %s", len(bounded), bounded[0])
	}
	return res, nil
}
