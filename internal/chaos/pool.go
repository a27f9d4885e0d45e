package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// PoolExhaustion gives a runtime the application's own pool (Config.Pool)
// with two connections, and runs slow handlers that each hold one of its
// connections for several leases: every connection of the pool is taken
// and the other handlers queue for one. Heartbeats and completions must not
// starve behind them: no lease may expire while its handler still runs, so
// every job completes at its first attempt.
func PoolExhaustion(ctx context.Context, env *Env, size Size) (*Result, error) {
	const (
		conns       = 2
		concurrency = 6
		jobs        = 6
		lease       = 2 * time.Second // heartbeats every 667 ms
		hold        = 2 * lease       // each handler holds a connection this long
	)
	res := &Result{Load: fmt.Sprintf("%d handlers, %d-connection pool", concurrency, conns)}
	db, err := env.newDatabase(ctx, "pool")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	pc, err := pgconfig.Pool(db.dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	log := newRunLog()
	lr, err := startRuntime(ctx, runtime.Config{
		Pool: pool, ListenDSN: db.direct, Concurrency: concurrency, Lease: lease,
		SafetyPoll: 10 * time.Minute,
		Logger:     env.logger().Named("pool"),
		Kinds: []runtime.Kind{{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
			i := log.begin(j.ID, j.Attempt, 0)
			err := func() error {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				_, err = conn.Exec(ctx, "SELECT pg_sleep($1::float8)", hold.Seconds())
				return err
			}()
			log.end(i, err == nil)
			return err
		}}},
	})
	if err != nil {
		return nil, err
	}
	defer lr.stop(10 * time.Second)
	params := make([]runtime.InsertParams, jobs)
	for i := range params {
		params[i] = runtime.InsertParams{Kind: "hold"}
	}
	if _, err := runtime.InsertMany(ctx, db.pool, params); err != nil {
		return nil, err
	}
	start := time.Now()
	var c tableCounts
	done := waitFor(ctx, 30*time.Second+2*jobs/conns*hold, func() bool {
		c, err = countJobs(ctx, db.pool, false)
		return err == nil && c.completed+c.dead == jobs
	})
	took := time.Since(start)
	st := lr.rt.Stats()
	if err := lr.stop(10 * time.Second); err != nil {
		res.check(false, "the runtime failed: %v", err)
	}
	var again int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE attempts > 1`).Scan(&again); err != nil {
		return nil, err
	}
	runs := log.snapshot()
	res.Lost = jobs - c.completed
	res.Duplicated = len(okTwice(runs))
	res.overlapping(runs, time.Now())
	res.check(done && res.Lost == 0, "%d of %d jobs did not complete", res.Lost, jobs)
	res.check(again == 0, "%d jobs ran more than once: their lease expired while their handler waited for or held a connection", again)
	res.check(st.LeaseLost == 0, "%d handlers lost their lease", st.LeaseLost)
	res.check(res.Duplicated == 0 && res.Overlapping == 0, "jobs ran twice (%d) or at once (%d)", res.Duplicated, res.Overlapping)
	res.note("each handler held one of the pool's %d connections for %s (lease %s, heartbeat every %s): %d of %d jobs completed in %.1fs, %d ran more than once, leases lost %d",
		conns, hold, lease, (lease / 3).Round(time.Millisecond), c.completed, jobs, took.Seconds(), again, st.LeaseLost)
	return res, nil
}
