package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// ShutdownGrace is how long past its --shutdown-timeout a `fila work`
// whose database cannot be reached may take to exit: what is left to write
// once its handlers are cancelled gets runtime.HardStopGraceDefault (as
// docs/cli.md says), and a second more lets the process take the signal and
// exit on a loaded machine.
const ShutdownGrace = runtime.HardStopGraceDefault + time.Second

// ShutdownDBDown sends SIGTERM to `fila work --shutdown-timeout 2s` processes
// running jobs whose database just became unreachable: their DSNs go through
// a proxy that goes silent (freeze) or resets every connection and refuses
// new ones (reset). Each runs two short jobs that finish during the drain
// (their completions cannot be written) and two long ones that the
// shutdown timeout cancels (their release cannot be written). Each must exit
// within the timeout plus ShutdownGrace, with a non-zero status, logging how
// many outcomes it could not write. When the database is back, those jobs
// run again on another worker, each once: nothing is lost.
func ShutdownDBDown(ctx context.Context, env *Env, size Size) (*Result, error) {
	if err := env.need(false, false, true); err != nil {
		return nil, err
	}
	const (
		// Longer than the stop (timeout plus HardStopGrace): every job
		// is still this worker's when SIGTERM comes, however late a loaded
		// machine delivers it, so the count it reports is all it held.
		lease    = 10 * time.Second
		timeout  = 2 * time.Second
		short    = 1.5 // seconds: ends during the drain
		long     = 60.0
		perKind  = 2
		heldJobs = 2 * perKind
	)
	res := &Result{Load: fmt.Sprintf("2 processes × %d jobs, --shutdown-timeout %s", heldJobs, timeout)}
	dir, cleanup, err := scenarioDir("dbdown")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	db, err := env.newDatabase(ctx, "dbdown")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	clk, err := measureClock(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	runFile := filepath.Join(dir, "runs")
	watch := watchRuns(runFile)
	defer watch.stop()
	defer watch.killAlive()
	markers := filepath.Join(dir, "first")
	type victim struct {
		mode        proxyMode
		name        string
		cut         *cut
		proc        *workerProc
		termAt      time.Time
		exitedAt    time.Time
		short, long string
		// heldShort and heldLong: its jobs of each kind still running once
		// the database was gone.
		heldShort, heldLong int
		err                 error
	}
	vs := []*victim{{mode: freeze, name: "silent"}, {mode: reset, name: "refusing"}}
	var rescueArgs []string
	for i, v := range vs {
		v.short, v.long = fmt.Sprintf("short%d", i), fmt.Sprintf("long%d", i)
		shortCmd := sleepingCommand(runFile, markers, short, 0.2)
		longCmd := sleepingCommand(runFile, markers, long, 0.2)
		rescueArgs = append(rescueArgs, "--exec", v.short+"="+shortCmd, "--exec", v.long+"="+longCmd)
		if v.cut, err = newCut(db); err != nil {
			return nil, err
		}
		defer v.cut.close()
		if v.proc, err = env.startWorkerOn(v.cut.mainDSN, v.cut.listenDSN, dir, i,
			"--concurrency", strconv.Itoa(heldJobs), "--lease", lease.String(), "--shutdown-timeout", timeout.String(),
			"--exec", v.short+"="+shortCmd, "--exec", v.long+"="+longCmd); err != nil {
			return nil, err
		}
		defer v.proc.kill()
	}
	if err := env.waitListening(ctx, db, len(vs)); err != nil {
		return nil, err
	}
	for _, v := range vs {
		if _, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT k FROM unnest(array[$1::text, $2::text]) k, generate_series(1, $3::int)`,
			v.short, v.long, perKind); err != nil {
			return nil, err
		}
	}
	env.progress("the database goes away (silent for worker 0, refusing for worker 1) once its jobs run; then SIGTERM")
	var wg sync.WaitGroup
	for i, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Once every command of this worker runs.
			if !waitFor(ctx, 30*time.Second, func() bool {
				runs, _ := watch.runs()
				n := 0
				for _, r := range runs {
					if r.worker == i {
						n++
					}
				}
				return n == heldJobs
			}) {
				v.err = fmt.Errorf("the %d commands of worker %d did not all start within 30s", heldJobs, i)
				return
			}
			v.cut.set(v.mode)
			if v.err = v.proc.signal(syscall.SIGTERM); v.err != nil {
				return
			}
			v.termAt = wall(time.Now())
			// What it holds: its jobs still running once the cut is in place
			// (a write under way when it came has landed by then).
			if sleepUntil(ctx, v.termAt.Add(200*time.Millisecond)) == nil {
				v.err = db.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = $1::text), count(*) FILTER (WHERE kind = $2::text)
					FROM fila_jobs WHERE state = 'running'`, v.short, v.long).Scan(&v.heldShort, &v.heldLong)
			}
			select {
			case <-v.proc.exited:
			case <-time.After(timeout + time.Minute):
				v.proc.kill()
			}
			v.exitedAt = wall(time.Now())
		}()
	}
	wg.Wait()
	for _, v := range vs {
		if v.err != nil {
			return nil, v.err
		}
	}
	for i, v := range vs {
		held := v.heldShort + v.heldLong
		took := v.exitedAt.Sub(v.termAt)
		res.Recovery = max(res.Recovery, took)
		code := 0
		var ee *exec.ExitError
		if errors.As(v.proc.err, &ee) {
			code = ee.ExitCode()
		}
		res.check(took <= timeout+ShutdownGrace, "worker %d (database %s) exited %s after SIGTERM: more than its --shutdown-timeout %s and %s of grace",
			i, v.name, took.Round(time.Millisecond), timeout, ShutdownGrace)
		res.check(v.proc.err != nil, "worker %d (database %s) exited with status 0 although it could not write the outcomes of its %d jobs", i, v.name, held)
		said := ""
		for _, line := range strings.Split(v.proc.log(), "\n") {
			if text, ok := saysCount(line, "outcome", held); ok {
				said = text
				break
			}
		}
		res.check(said != "", "worker %d (database %s) did not log how many outcomes it could not write (%d)", i, v.name, held)
		res.note("database %s: SIGTERM to a worker running %d jobs (%d ending during the drain, %d cancelled by --shutdown-timeout %s): exited after %s with status %d; it said: %s",
			v.name, held, v.heldShort, v.heldLong, timeout, took.Round(time.Millisecond), code, said)
	}
	// The database is back: another worker runs whatever did not end.
	for _, v := range vs {
		v.cut.set(forward)
	}
	backAt := wall(time.Now())
	rescuer, err := env.startWorker(db, dir, 9, append([]string{"--concurrency", "8", "--lease", lease.String()}, rescueArgs...)...)
	if err != nil {
		return nil, err
	}
	defer rescuer.kill()
	jobs := len(vs) * heldJobs
	var c tableCounts
	done := waitFor(ctx, 30*time.Second+2*lease, func() bool {
		c, err = countJobs(ctx, db.pool, false)
		return err == nil && c.completed == jobs
	})
	res.check(done, "%d of %d jobs completed within %s of the database coming back", c.completed, jobs, 30*time.Second+2*lease)
	_ = rescuer.signal(syscall.SIGTERM)
	<-rescuer.exited
	res.Lost = jobs - c.completed
	runs, err := watch.runs()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	exps, err := leaseExpiries(ctx, db, clk)
	if err != nil {
		return nil, err
	}
	res.recordMargins(rescueMargins(runs, exps, now))
	ov := res.overlapping(runs, now)
	res.check(len(ov) == 0, "jobs ran twice at once: %s", ids(ov, 10))
	var again int
	for _, r := range runs {
		if r.worker == 9 {
			again++
		}
	}
	var ranAfter time.Duration
	for _, r := range runs {
		if r.worker == 9 && r.start.Sub(backAt) > ranAfter {
			ranAfter = r.start.Sub(backAt)
		}
	}
	res.Duplicated = len(okTwice(runs))
	if res.Duplicated > 0 {
		res.note("duplicated %d: short jobs whose command had finished while the database was away, their completion unwritten, ran again (at-least-once delivery)", res.Duplicated)
	}
	res.note("database back: %d jobs ran again on another worker, the last starting %s later (after the leases the stopped workers held expired); %d of %d completed",
		again, ranAfter.Round(time.Millisecond), c.completed, jobs)
	if !res.OK() {
		res.note("worker 0 output: %s", vs[0].proc.logTail())
	}
	return res, nil
}

// saysCount reports whether a line of a worker's output says n of what
// (a word its message contains): a JSON log entry whose message names it
// and gives n in the message or as a count field (not an attempt number),
// or a plain line (such as the error the process exits with) naming it and
// n. It returns the line as text.
func saysCount(line, what string, n int) (string, bool) {
	num := regexp.MustCompile(`\b` + strconv.Itoa(n) + `\b`)
	var entry map[string]any
	if json.Unmarshal([]byte(line), &entry) != nil {
		line = strings.TrimSpace(line)
		return line, strings.Contains(strings.ToLower(line), what) && num.MatchString(line)
	}
	msg, _ := entry["msg"].(string)
	if !strings.Contains(strings.ToLower(msg), what) {
		return "", false
	}
	found := num.MatchString(msg)
	var fields []string
	for k, v := range entry {
		switch k {
		case "msg", "ts", "level", "logger", "caller", "stacktrace":
			continue
		}
		fields = append(fields, fmt.Sprintf("%s=%v", k, v))
		if f, ok := v.(float64); ok && f == float64(n) && !strings.Contains(k, "attempt") {
			found = true
		}
	}
	sort.Strings(fields)
	return msg + " (" + strings.Join(fields, ", ") + ")", found
}
