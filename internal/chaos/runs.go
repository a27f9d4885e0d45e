package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// run is one execution of a handler: one attempt of one job on one worker.
type run struct {
	job     int64
	attempt int
	worker  int
	start   time.Time
	end     time.Time // zero while it runs (or when its process was killed)
	ok      bool      // the handler's effect took place (it returned success)
}

// runLog records the runs of in-process handlers.
type runLog struct {
	mu   sync.Mutex
	runs []run
	ok   map[int64]bool // jobs with a successful run
	last time.Time      // time of the latest successful run
}

func newRunLog() *runLog { return &runLog{ok: map[int64]bool{}} }

// begin records the start of a run and returns its index for end.
func (l *runLog) begin(job int64, attempt, worker int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, run{job: job, attempt: attempt, worker: worker, start: time.Now()})
	return len(l.runs) - 1
}

func (l *runLog) end(i int, ok bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[i].end, l.runs[i].ok = now, ok
	if ok {
		l.ok[l.runs[i].job] = true
		l.last = now
	}
}

// progress returns how many jobs ran successfully, and when the latest did.
func (l *runLog) progress() (jobs int, last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ok), l.last
}

func (l *runLog) snapshot() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// overlaps returns the jobs that two runs held at the same time. A run with
// no end lasts until openEnd (the kill of its process, or now).
func overlaps(runs []run, openEnd time.Time) []int64 {
	byJob := map[int64][]run{}
	for _, r := range runs {
		byJob[r.job] = append(byJob[r.job], r)
	}
	var out []int64
	for job, rs := range byJob {
		if len(rs) < 2 {
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		end := func(r run) time.Time {
			if r.end.IsZero() {
				return openEnd
			}
			return r.end
		}
		latest := end(rs[0])
		for _, r := range rs[1:] {
			if r.start.Before(latest) {
				out = append(out, job)
				break
			}
			if e := end(r); e.After(latest) {
				latest = e
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// okTwice returns the jobs with more than one successful run.
func okTwice(runs []run) []int64 {
	n := map[int64]int{}
	for _, r := range runs {
		if r.ok {
			n[r.job]++
		}
	}
	var out []int64
	for job, c := range n {
		if c > 1 {
			out = append(out, job)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// runsTableSQL creates the table in-process handlers record their effects
// in: one row per attempt that took effect. The unique constraint turns a
// second effect of the same attempt into an error, and count(*) per job
// shows a job that took effect twice.
const runsTableSQL = `CREATE TABLE chaos_runs (
    job_id      bigint      NOT NULL,
    attempt     int         NOT NULL,
    worker      int         NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (job_id, attempt)
)`

const insertRunSQL = `INSERT INTO chaos_runs (job_id, attempt, worker, started_at) VALUES ($1::bigint, $2::int, $3::int, $4::timestamptz)`

// tableCounts is what the database says about a scenario's jobs.
type tableCounts struct {
	jobs, completed, dead, pending, running, liveLeases int
	runsRows                                            int     // rows in chaos_runs
	jobsTwice                                           []int64 // jobs with more than one row in chaos_runs
	jobsWithoutRun                                      int     // completed jobs with no row in chaos_runs
}

func countJobs(ctx context.Context, pool *pgxpool.Pool, withRuns bool) (tableCounts, error) {
	var c tableCounts
	err := pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'dead'),
		count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'running'),
		count(*) FILTER (WHERE state = 'running' AND lease_until > now())
		FROM fila_jobs`).Scan(&c.jobs, &c.completed, &c.dead, &c.pending, &c.running, &c.liveLeases)
	if err != nil || !withRuns {
		return c, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM chaos_runs`).Scan(&c.runsRows); err != nil {
		return c, err
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(job_id ORDER BY job_id), '{}') FROM
		(SELECT job_id FROM chaos_runs GROUP BY job_id HAVING count(*) > 1) d`).Scan(&c.jobsTwice); err != nil {
		return c, err
	}
	err = pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs j WHERE state = 'completed'
		AND NOT EXISTS (SELECT 1 FROM chaos_runs r WHERE r.job_id = j.id)`).Scan(&c.jobsWithoutRun)
	return c, err
}

// readRunFile parses the lines the recording --exec command of worker
// processes appends: "start|end JOB ATTEMPT WORKER UNIX_NANOS".
func readRunFile(path string) ([]run, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct {
		job     int64
		attempt int
		worker  int
	}
	idx := map[key]int{}
	var runs []run
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue // a line cut by a kill
		}
		job, err1 := strconv.ParseInt(fs[1], 10, 64)
		attempt, err2 := strconv.Atoi(fs[2])
		worker, err3 := strconv.Atoi(fs[3])
		ns, err4 := strconv.ParseInt(fs[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		k := key{job, attempt, worker}
		at := time.Unix(0, ns)
		switch fs[0] {
		case "start":
			idx[k] = len(runs)
			runs = append(runs, run{job: job, attempt: attempt, worker: worker, start: at})
		case "end":
			if i, ok := idx[k]; ok {
				runs[i].end, runs[i].ok = at, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return runs, nil
}

// recordingCommand is an --exec command that appends its start and end to
// file, sleeping seconds in between. CHAOS_WORKER names the worker process.
func recordingCommand(file string, seconds float64) string {
	stamp := func(what string) string {
		return fmt.Sprintf(`echo "%s $FILA_JOB_ID $FILA_JOB_ATTEMPT $CHAOS_WORKER $(date +%%s%%N)" >> %s`, what, file)
	}
	return fmt.Sprintf("%s; sleep %g; %s", stamp("start"), seconds, stamp("end"))
}

func ids(xs []int64, max int) string {
	var b strings.Builder
	for i, x := range xs {
		if i == max {
			fmt.Fprintf(&b, " …(%d more)", len(xs)-max)
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	return b.String()
}
