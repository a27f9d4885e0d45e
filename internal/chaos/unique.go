package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// UniquePending runs jobs whose unique key is held only while pending (one
// queued while one runs: --unique-states pending) through `fila work`
// processes whose commands fail their first attempt, enqueues a job of the
// same key while each first one runs, and SIGKILLs one worker while it
// holds some. Every path that moves a job back to pending meets the key
// taken: a retry, and the rescue of the killed worker's leases. None may
// wedge a worker or a claim: every job ends (the newer job of each key
// completed, the older one completed or cancelled in its favour, naming
// it), no two runs of a job overlap, and the workers keep claiming.
func UniquePending(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		workers = 3
		lease   = 2 * time.Second
	)
	keys := min(max(size.Jobs/1000, 10), 20) // every first job running at once: at most the slots, 3 × 8
	res := &Result{Load: fmt.Sprintf("%d keys × 2 jobs (unique while pending), first attempts failing, %d processes, one SIGKILLed", keys, workers)}
	dir, cleanup, err := scenarioDir("unique")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "unique")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	// A first attempt runs for a second and fails; later ones succeed.
	command := fmt.Sprintf(`%s; sleep 1 & p=$!; %s; wait $p; if [ "$FILA_JOB_ATTEMPT" = 1 ]; then echo upstream busy >&2; exit 1; fi; %s`,
		stampLine(runFile, "start", ""), stampLine(runFile, "pid", "$p"), stampLine(runFile, "end", ""))
	procs := make([]*workerProc, workers)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	for i := range procs {
		if procs[i], err = env.startWorker(db, dir, i, "--concurrency", "8", "--lease", lease.String(), "--exec", "job="+command); err != nil {
			return nil, err
		}
	}
	if err := env.waitListening(ctx, db, workers); err != nil {
		return nil, err
	}
	// The first job of each key, then, once it runs, the second: the key is
	// free while its first job runs. The second is due 4 s later, so that it
	// still waits, pending, holding the key, when the first fails (after
	// 1 s) and when the killed worker's leases are rescued (after 2 s).
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, unique_key, unique_states, max_attempts)
		SELECT 'job', 'key:' || k, '{pending}', 3 FROM generate_series(1, $1::int) AS k`, keys); err != nil {
		return nil, err
	}
	if !waitFor(ctx, 60*time.Second, func() bool {
		var running int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'running'`).Scan(&running)
		return running == keys
	}) {
		return nil, fmt.Errorf("the first jobs of the %d keys were not all running within 60s", keys)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, unique_key, unique_states, max_attempts, run_at)
		SELECT 'job', 'key:' || k, '{pending}', 3, now() + interval '4 seconds' FROM generate_series(1, $1::int) AS k`, keys); err != nil {
		return nil, fmt.Errorf("enqueue the second job of each key while the first runs: %w", err)
	}
	victim := procs[0]
	env.progress("killing worker %d (pid %d) while it runs first attempts", victim.n, victim.pid())
	if err := victim.signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	<-victim.exited
	killedAt := time.Now()

	settled := waitFor(ctx, 60*time.Second+3*lease, func() bool {
		var open int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state IN ('pending', 'running')`).Scan(&open)
		return open == 0
	})
	res.check(settled, "jobs still pending or running 60 s after the kill: a worker or a claim is wedged")
	if settled {
		res.Recovery = time.Since(killedAt)
	}
	rows, err := db.pool.Query(ctx, `SELECT id, unique_key, state, coalesce(last_error, ''), attempts FROM fila_jobs ORDER BY id`)
	if err != nil {
		return nil, err
	}
	type job struct {
		key, state, lastError string
		attempts              int
	}
	byKey := map[string][]job{}
	for rows.Next() {
		var id int64
		var key *string
		var j job
		if err := rows.Scan(&id, &key, &j.state, &j.lastError, &j.attempts); err != nil {
			rows.Close()
			return nil, err
		}
		if key == nil {
			rows.Close()
			return nil, fmt.Errorf("job %d lost its unique key", id)
		}
		byKey[*key] = append(byKey[*key], j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var superseded, byRetry, byRescue, completedBoth int
	for k, js := range byKey {
		res.check(len(js) == 2, "key %s has %d jobs, want 2", k, len(js))
		if len(js) != 2 {
			continue
		}
		first, second := js[0], js[1]
		res.check(second.state == runtime.StateCompleted, "key %s: the newer job ended %s (%s)", k, second.state, second.lastError)
		switch first.state {
		case runtime.StateCancelled:
			superseded++
			res.check(strings.Contains(first.lastError, "which runs instead"),
				"key %s: the older job was cancelled without naming the job that took its place: %s", k, first.lastError)
			if strings.Contains(first.lastError, "lease expired") {
				byRescue++
			} else {
				byRetry++
			}
		case runtime.StateCompleted:
			completedBoth++ // its retry came after the newer job had left pending (a slow machine)
		default:
			res.check(false, "key %s: the older job ended %s (%s)", k, first.state, first.lastError)
		}
		if second.state != runtime.StateCompleted || (first.state != runtime.StateCancelled && first.state != runtime.StateCompleted) {
			res.Lost++
		}
	}
	res.check(superseded > 0, "no older job met its key taken: the scenario proved nothing")
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	res.check(len(res.overlapping(runs, time.Now())) == 0, "jobs ran twice at the same time")
	res.Duplicated = NA
	res.note("%d keys, each with a job held by its key only while pending and a second one enqueued while the first ran; "+
		"the first attempts failed, and worker %d was SIGKILLed while it ran some", keys, victim.n)
	res.note("%d older jobs found their key taken and were cancelled in favour of the newer one (%d at a retry, %d at the rescue of the killed worker's lease); "+
		"%d completed at a later attempt (their retry came after the newer job had left pending); every newer job completed; "+
		"nothing pending or running %s after the kill", superseded, byRetry, byRescue, completedBoth, res.Recovery.Round(time.Millisecond))
	if !res.OK() {
		for _, p := range procs[1:] {
			res.note("worker %d's output: %s", p.n, p.logTail())
		}
	}
	return res, nil
}
