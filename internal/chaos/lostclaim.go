package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fila-run/fila/runtime"
)

// LostClaimReply loses the reply of claims that committed: the main DSN of
// a runtime goes through a proxy that, when a claim is armed to be lost,
// lets the claim commit and closes the worker's connection before the reply
// reaches it (as when a PgBouncer dies under load). The jobs it took sit
// running under a lease nobody holds, their handlers never started. Every
// job has max_attempts = 1, so an attempt spent that way would end it dead
// without having run: none may end dead, every job must complete, each
// handler run once.
func LostClaimReply(ctx context.Context, env *Env, size Size) (*Result, error) {
	const (
		lease = 2 * time.Second
		batch = 5
	)
	n := rounds(size)
	res := &Result{Load: fmt.Sprintf("%d × %d jobs of 1 attempt, %d claim replies lost, lease %s", n, batch, n, lease)}
	db, err := env.newDatabase(ctx, "lostclaim")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	// Every claim that commits is written down, whether its reply reaches
	// the worker or not.
	if _, err := db.pool.Exec(ctx, claimLogSQL); err != nil {
		return nil, err
	}
	target, err := hostPort(db.dsn)
	if err != nil {
		return nil, err
	}
	px, err := startClaimProxy(target)
	if err != nil {
		return nil, err
	}
	defer px.close()
	mainDSN, err := viaProxy(db.dsn, px.addr(), 2)
	if err != nil {
		return nil, err
	}
	log := newRunLog()
	lr, err := startRuntime(ctx, runtime.Config{
		DSN: mainDSN, ListenDSN: db.direct, Concurrency: batch, Lease: lease,
		RetryBase: 50 * time.Millisecond, RetryMax: time.Second,
		Logger: env.logger().Named("lostclaim"),
		Kinds: []runtime.Kind{{Name: "once", Handler: func(ctx context.Context, j *runtime.Job) error {
			i := log.begin(j.ID, j.Attempt, 0)
			time.Sleep(20 * time.Millisecond)
			log.end(i, true)
			return nil
		}}},
	})
	if err != nil {
		return nil, err
	}
	defer lr.stop(10 * time.Second)
	cw := px.claims
	for round := range n {
		// The next claim to take a job, the batch's, loses its reply.
		lost := cw.lost.Load()
		cw.loseClaimReplies(1)
		if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, max_attempts) SELECT 'once', 1 FROM generate_series(1, $1::int)`, batch); err != nil {
			return nil, err
		}
		if !waitFor(ctx, 10*time.Second, func() bool { return cw.lost.Load() > lost }) {
			return nil, fmt.Errorf("round %d: no claim went through the proxy within 10s of the insert", round)
		}
		// Let the worker reconnect and run the rest before the next batch.
		if err := sleepUntil(ctx, time.Now().Add(300*time.Millisecond)); err != nil {
			return nil, err
		}
	}
	jobs := n * batch
	var c tableCounts
	settled := waitFor(ctx, 30*time.Second+2*lease, func() bool {
		c, err = countJobs(ctx, db.pool, false)
		return err == nil && c.completed+c.dead == jobs
	})
	res.check(settled, "jobs still pending or running %s after the last lost reply", 30*time.Second+2*lease)
	if err := lr.stop(10 * time.Second); err != nil {
		res.check(false, "the runtime failed: %v", err)
	}
	if c, err = countJobs(ctx, db.pool, false); err != nil {
		return nil, err
	}
	runs := log.snapshot()
	perJob := map[int64]int{}
	for _, r := range runs {
		perJob[r.job]++
	}
	// The jobs the lost claims took: claimed more often than they ran.
	claims := map[int64]int{}
	crows, err := db.pool.Query(ctx, `SELECT job_id, count(*) FROM chaos_claims GROUP BY job_id`)
	if err != nil {
		return nil, err
	}
	for crows.Next() {
		var id int64
		var n int
		if err := crows.Scan(&id, &n); err != nil {
			crows.Close()
			return nil, err
		}
		claims[id] = n
	}
	crows.Close()
	held := 0
	for id, n := range claims {
		if n > perJob[id] {
			held++
		}
	}
	var twice, never int
	var notDone []string
	var deadUnrun []int64
	rows, err := db.pool.Query(ctx, `SELECT id, state, attempts, coalesce(last_error, '') FROM fila_jobs ORDER BY id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var state, lastErr string
		var attempts int
		if err := rows.Scan(&id, &state, &attempts, &lastErr); err != nil {
			rows.Close()
			return nil, err
		}
		switch {
		case state != runtime.StateCompleted:
			res.Lost++
			if len(notDone) < 3 {
				notDone = append(notDone, fmt.Sprintf("job %d ended %s at attempt %d, its handler run %d times: %s", id, state, attempts, perJob[id], firstLine(lastErr)))
			}
			if state == runtime.StateDead && perJob[id] == 0 {
				deadUnrun = append(deadUnrun, id)
			}
		case perJob[id] > 1:
			twice++
		case perJob[id] == 0:
			never++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res.check(len(deadUnrun) == 0, "%d jobs ended dead without any handler having run: %s", len(deadUnrun), ids(deadUnrun, 10))
	res.check(res.Lost == 0, "%d of %d jobs did not complete: %s", res.Lost, jobs, strings.Join(notDone, "; "))
	res.Duplicated = twice
	res.check(twice == 0, "%d jobs ran more than once", twice)
	res.check(never == 0, "%d jobs completed without their handler running", never)
	ov := res.overlapping(runs, time.Now())
	res.check(len(ov) == 0, "jobs ran twice at once: %s", ids(ov, 10))
	res.check(held > 0, "no claim whose reply was lost had taken a job: nothing was tested")
	res.note("%d claims whose reply was lost, out of %d claims through the proxy; %d jobs were claimed by them (a committed claim whose handler never started); dead %d of %d jobs of max_attempts 1",
		cw.lost.Load(), cw.seen.Load(), held, c.dead, jobs)
	return res, nil
}

// claimLogSQL records in chaos_claims every claim of a job that commits:
// each time a job starts running with a new started_at.
const claimLogSQL = `CREATE TABLE chaos_claims (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION chaos_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_claims (job_id) VALUES (NEW.id);
    RETURN NULL;
END
$$;
CREATE TRIGGER chaos_claimed AFTER UPDATE ON fila_jobs FOR EACH ROW
    WHEN (NEW.state = 'running' AND NEW.started_at IS DISTINCT FROM OLD.started_at)
    EXECUTE FUNCTION chaos_claimed();`
