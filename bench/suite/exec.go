package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// ExecConcurrency is the --concurrency of the exec scenario's worker and
// the -P of its xargs.
const ExecConcurrency = 32

// execRounds is how many times each side of the exec scenario runs,
// alternating which goes first; the best round of each is kept.
const execRounds = 2

// execKind is the kind the exec scenario's worker runs with --exec.
const execKind = "exec-true"

// exec drains ExecJobs jobs of `fila work --concurrency 32 --exec
// KIND=true`, a real worker process of the fila binary under test, from a
// backlog inserted in one statement, next to the same number of `sh -c
// true` run by `xargs -P 32`: the floor of running a command per job. A
// warm-up batch first lets the worker start its exec guards, as a worker
// that has been running has; the round then counts from the backlog's
// commit until every job is completed. The worker's CPU (its own and its
// guards', beyond the commands they run) is read from /proc.
func (s *suite) exec(ctx context.Context) (err error) {
	if s.opts.FilaBin == "" {
		return fmt.Errorf("%w: no fila binary to run (Options.FilaBin)", errSkipped)
	}
	xargs, err := exec.LookPath("xargs")
	if err != nil {
		return fmt.Errorf("%w: %v", errSkipped, err)
	}
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := startExecWorker(ctx, s.opts.FilaBin, db.dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.stop()) }()

	n := s.opts.ExecJobs
	prog := report.NewProgress(s.opts.Progress, "exec", 2*execRounds*n+2*ExecConcurrency)
	defer prog.Done()
	if _, err := w.drain(ctx, pool, 2*ExecConcurrency); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	prog.Add(2 * ExecConcurrency)

	res := &bench.ExecResult{Jobs: n, Concurrency: ExecConcurrency, Rounds: execRounds}
	var bestFila, bestXargs time.Duration
	runFila := func() error {
		before, err := w.cpu()
		if err != nil {
			return err
		}
		d, err := w.drain(ctx, pool, n)
		if err != nil {
			return err
		}
		after, err := w.cpu()
		if err != nil {
			return err
		}
		if bestFila == 0 || d < bestFila {
			bestFila = d
			per := func(c time.Duration) float64 { return float64(c.Microseconds()) / float64(n) }
			res.FilaOverheadCPUUs = per(after.own - before.own)
			res.FilaCommandCPUUs = per(after.commands - before.commands)
		}
		return nil
	}
	runXargs := func() error {
		d, cpu, err := xargsTrue(ctx, xargs, n)
		if err != nil {
			return err
		}
		if bestXargs == 0 || d < bestXargs {
			bestXargs = d
			res.XargsCPUUs = float64(cpu.Microseconds()) / float64(n)
		}
		return nil
	}
	for round := range execRounds {
		order := []func() error{runFila, runXargs}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, run := range order {
			if err := run(); err != nil {
				return err
			}
			prog.Add(n)
		}
	}
	res.FilaSec, res.FilaPerSec = bestFila.Seconds(), float64(n)/bestFila.Seconds()
	res.XargsSec, res.XargsPerSec = bestXargs.Seconds(), float64(n)/bestXargs.Seconds()
	s.res.Exec = res
	return nil
}

// execWorker is the exec scenario's `fila work` process.
type execWorker struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
	total  int // jobs inserted so far
}

func startExecWorker(ctx context.Context, bin, dsn string) (*execWorker, error) {
	cmd := exec.Command(bin, "work", "--dsn", dsn, "--concurrency", strconv.Itoa(ExecConcurrency),
		"--log-level", "warn", "--log-format", "json", "--exec", execKind+"=true")
	w := &execWorker{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s work: %w", bin, err)
	}
	go func() { w.done <- cmd.Wait() }()
	return w, nil
}

// stop ends the worker as its users would (SIGTERM), and kills it if it
// has not stopped within a lease.
func (w *execWorker) stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		if err != nil {
			return fmt.Errorf("fila work: %w: %s", err, w.logTail())
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
		return fmt.Errorf("fila work did not stop within 30s of SIGTERM: %s", w.logTail())
	}
}

func (w *execWorker) logTail() string {
	s := strings.TrimSpace(w.stderr.String())
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// drain inserts n jobs in one statement and returns the time from its
// commit until every job of the table is completed. Any job that ended
// otherwise is an error: the figure would not be a drain.
func (w *execWorker) drain(ctx context.Context, pool *pgxpool.Pool, n int) (time.Duration, error) {
	if _, err := pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT $1::text FROM generate_series(1, $2::int)`, execKind, n); err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	begin := time.Now()
	w.total += n
	deadline := begin.Add(time.Duration(n)*100*time.Millisecond + time.Minute)
	for {
		var completed, other int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
			count(*) FILTER (WHERE state NOT IN ('completed', 'pending', 'running'))
			FROM fila_jobs`).Scan(&completed, &other); err != nil {
			return 0, err
		}
		if other > 0 {
			return 0, fmt.Errorf("%d jobs of `--exec %s=true` did not complete: %s", other, execKind, w.logTail())
		}
		if completed == w.total {
			return time.Since(begin), nil
		}
		select {
		case err := <-w.done:
			return 0, fmt.Errorf("fila work exited (%v) with %d of %d jobs completed: %s", err, completed, w.total, w.logTail())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d jobs completed after %s", completed, w.total, time.Since(begin).Round(time.Millisecond))
		}
	}
}

// workerCPU is the CPU time the worker used: own is the worker process and
// its guards, commands what the guards' children (the commands) used.
type workerCPU struct{ own, commands time.Duration }

// cpu reads the worker's CPU from /proc: its own and its exited children's
// (guards that exited, with their commands: rare, counted as its own), and
// each live guard's own and its commands'.
func (w *execWorker) cpu() (workerCPU, error) {
	pid := w.cmd.Process.Pid
	self, children, err := procStat(pid)
	if err != nil {
		return workerCPU{}, err
	}
	c := workerCPU{own: self + children}
	for _, g := range childPids(pid) {
		own, cmds, err := procStat(g)
		if err != nil {
			continue // exited meanwhile
		}
		c.own += own
		c.commands += cmds
	}
	return c, nil
}

// clockTick is the unit of the CPU times of /proc/PID/stat (USER_HZ, 100
// on every Linux architecture Fila runs on).
const clockTick = 10 * time.Millisecond

// procStat reads a process's own CPU (utime+stime) and its waited-for
// children's (cutime+cstime).
func procStat(pid int) (own, children time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which may hold spaces, in ().
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is the state (field 3); utime, stime, cutime, cstime are 14–17.
	var t [4]int64
	for k := range t {
		if t[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return time.Duration(t[0]+t[1]) * clockTick, time.Duration(t[2]+t[3]) * clockTick, nil
}

// childPids lists a process's children, from every thread's children file.
func childPids(pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(s); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// xargsTrue runs `xargs -P 32 -I{} sh -c true` on n lines, as
// `seq N | xargs …` does, and returns how long it took and the CPU it and
// its commands used.
func xargsTrue(ctx context.Context, xargs string, n int) (time.Duration, time.Duration, error) {
	var lines strings.Builder
	for i := range n {
		lines.WriteString(strconv.Itoa(i + 1))
		lines.WriteByte('\n')
	}
	cmd := exec.CommandContext(ctx, xargs, "-P", strconv.Itoa(ExecConcurrency), "-I{}", "sh", "-c", "true")
	cmd.Stdin = strings.NewReader(lines.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	begin := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("xargs: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	d := time.Since(begin)
	// The rusage of a waited-for process includes the children it waited
	// for: here, every sh.
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var cpu time.Duration
	if ru != nil {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return d, cpu, nil
}
