package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// run is one execution of a handler: one attempt of one job on one worker.
// Every time in it is on one clock, the wall clock of this machine (which is
// also the database's: the scenarios run PostgreSQL on loopback), kept as
// wall time only so that times read from files, from /proc and from the
// database compare with those taken here.
type run struct {
	job     int64
	attempt int
	worker  int
	// pid is the shell of an --exec command (its $$), 0 for an in-process
	// handler or a command that did not report it.
	pid   int
	start time.Time
	// end is when the run was over: the handler returned, or the last of
	// the command's watched processes (its shell and the children it
	// reported) was last seen alive. Zero while it runs: while any of
	// those processes lives.
	end time.Time
	ok  bool // the handler's effect took place (it returned success)
	// wrote is the end a command wrote, if it did.
	wrote time.Time
	// procs are the command's watched processes (see runWatch).
	procs []procLife
}

// procLife is what a runWatch saw of one process of a command.
type procLife struct {
	pid int
	// child: reported by the command as one it started (not its shell).
	child bool
	alive bool // still running when the runs were read
	// lastAlive is the last time it was seen alive: a lower bound of its
	// death, at most one poll (about a millisecond) early.
	lastAlive time.Time
}

// wall drops the monotonic reading of t, so that it compares with times
// from other processes on the wall clock.
func wall(t time.Time) time.Time { return t.Round(0) }

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
	l.runs = append(l.runs, run{job: job, attempt: attempt, worker: worker, start: wall(time.Now())})
	return len(l.runs) - 1
}

func (l *runLog) end(i int, ok bool) {
	now := wall(time.Now())
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
	jobs, _ := overlapStats(runs, openEnd)
	return jobs
}

// overlapStats returns the jobs that two runs held at the same time, and
// the longest time two runs of one job ran at once. A run with no end lasts
// until openEnd.
func overlapStats(runs []run, openEnd time.Time) (jobs []int64, worst time.Duration) {
	byJob := map[int64][]run{}
	for _, r := range runs {
		byJob[r.job] = append(byJob[r.job], r)
	}
	openEnd = wall(openEnd)
	end := func(r run) time.Time {
		if r.end.IsZero() {
			return openEnd
		}
		return r.end
	}
	for job, rs := range byJob {
		if len(rs) < 2 {
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		latest := end(rs[0])
		overlapped := false
		for _, r := range rs[1:] {
			e := end(r)
			if r.start.Before(latest) {
				overlapped = true
				worst = max(worst, minTime(latest, e).Sub(r.start))
			}
			if e.After(latest) {
				latest = e
			}
		}
		if overlapped {
			jobs = append(jobs, job)
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i] < jobs[j] })
	return jobs, worst
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// overlapping measures runs into res: the jobs two runs held at once
// (returned, and counted in Overlapping) and the worst overlap. A run with
// no end lasts until openEnd.
func (res *Result) overlapping(runs []run, openEnd time.Time) []int64 {
	jobs, worst := overlapStats(runs, openEnd)
	res.Overlapping, res.WorstOverlap = len(jobs), worst
	return jobs
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

// runLine is one line of a run file:
//
//	start JOB ATTEMPT WORKER UNIX_NANOS [PID]
//	pid   JOB ATTEMPT WORKER UNIX_NANOS PID CHILD_PID
//	end   JOB ATTEMPT WORKER UNIX_NANOS [PID]
//
// PID is the command's shell ($$); a pid line names a process the command
// started, to be watched with it.
type runLine struct {
	what  string
	key   runKey
	at    time.Time
	child int
}

// runKey tells the runs of a file apart.
type runKey struct {
	job     int64
	attempt int
	worker  int
	pid     int
}

func parseRunLine(line string) (runLine, bool) {
	fs := strings.Fields(line)
	var l runLine
	if len(fs) < 5 {
		return l, false // a line cut by a kill
	}
	l.what = fs[0]
	want := map[string][]int{"start": {5, 6}, "end": {5, 6}, "pid": {7}}[l.what]
	if len(want) == 0 || (len(fs) != want[0] && (len(want) < 2 || len(fs) != want[1])) {
		return l, false
	}
	nums := make([]int64, len(fs)-1)
	for i, f := range fs[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return l, false
		}
		nums[i] = n
	}
	l.key = runKey{job: nums[0], attempt: int(nums[1]), worker: int(nums[2])}
	l.at = time.Unix(0, nums[3])
	if len(nums) > 4 {
		l.key.pid = int(nums[4])
	}
	if l.what == "pid" {
		l.child = int(nums[5])
	}
	return l, true
}

// runSet gathers the runs of a run file's lines, with the processes to
// watch.
type runSet struct {
	runs  []*fileRun
	index map[runKey]int
}

// fileRun is a run read from a file, with its watched processes.
type fileRun struct {
	run
	stamped time.Time // the end the command wrote
	procs   []*watched
}

// watched is one process of a command.
type watched struct {
	pid   int
	child bool
	ident string // its start time in /proc, once seen
	dead  bool
	// lastAlive: the last time it was seen alive (at first, when it was
	// reported).
	lastAlive time.Time
}

// add takes a line in.
func (s *runSet) add(l runLine) {
	if s.index == nil {
		s.index = map[runKey]int{}
	}
	i, ok := s.index[l.key]
	switch l.what {
	case "start":
		if ok {
			return
		}
		r := &fileRun{run: run{job: l.key.job, attempt: l.key.attempt, worker: l.key.worker, pid: l.key.pid, start: l.at}}
		if l.key.pid > 0 {
			r.procs = append(r.procs, &watched{pid: l.key.pid, lastAlive: l.at})
		}
		s.index[l.key] = len(s.runs)
		s.runs = append(s.runs, r)
	case "pid":
		if ok {
			s.runs[i].procs = append(s.runs[i].procs, &watched{pid: l.child, child: true, lastAlive: l.at})
		}
	case "end":
		if ok {
			s.runs[i].stamped, s.runs[i].ok = l.at, true
		}
	}
}

// snapshot returns the runs as they stand: a run whose watched processes
// all died ends when the last was last seen alive (or at its written end,
// if later); one with a process alive has not ended.
func (s *runSet) snapshot() []run {
	out := make([]run, 0, len(s.runs))
	for _, fr := range s.runs {
		r := fr.run
		r.procs = nil
		r.end, r.wrote = fr.stamped, fr.stamped
		alive := false
		for _, p := range fr.procs {
			r.procs = append(r.procs, procLife{pid: p.pid, child: p.child, alive: !p.dead, lastAlive: p.lastAlive})
			if !p.dead {
				alive = true
			} else if p.lastAlive.After(r.end) {
				r.end = p.lastAlive
			}
		}
		if alive {
			r.end = time.Time{}
		}
		out = append(out, r)
	}
	return out
}

// stampLine is the shell that appends a run file's line of kind what
// (start, end, or pid followed by the child's pid as extra).
func stampLine(file, what, extra string) string {
	if extra != "" {
		extra = " " + extra
	}
	return fmt.Sprintf(`echo "%s $FILA_JOB_ID $FILA_JOB_ATTEMPT $CHAOS_WORKER $(date +%%s%%N) $$%s" >> %s`, what, extra, file)
}

// recordingCommand is an --exec command that appends its start and end to
// file, sleeping seconds in between. CHAOS_WORKER names the worker process.
// The sleep runs as a child the command reports, so that a runWatch sees it
// die even if the command's shell is killed first.
func recordingCommand(file string, seconds float64) string {
	return fmt.Sprintf("%s; sleep %g & p=$!; %s; wait $p; %s",
		stampLine(file, "start", ""), seconds, stampLine(file, "pid", "$p"), stampLine(file, "end", ""))
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
