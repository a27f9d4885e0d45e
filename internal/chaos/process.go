package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fila-run/fila/listener"
)

// workerProc is a `fila work` process.
type workerProc struct {
	n      int
	cmd    *exec.Cmd
	logf   string
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startWorker starts `fila work` number n on db with args, its output in a
// file of dir. CHAOS_WORKER=n is in the environment of its --exec commands.
func (e *Env) startWorker(db *database, dir string, n int, args ...string) (*workerProc, error) {
	return e.startWorkerOn(db.dsn, db.direct, dir, n, args...)
}

// startWorkerOn starts `fila work` number n with the given main and listen
// DSNs (through a proxy, say), as startWorker does.
func (e *Env) startWorkerOn(mainDSN, listenDSN, dir string, n int, args ...string) (*workerProc, error) {
	logf := filepath.Join(dir, fmt.Sprintf("worker%d.log", n))
	out, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(e.FilaBin, append([]string{"work", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), "FILA_DSN="+mainDSN, "FILA_LISTEN_DSN="+listenDSN, "CHAOS_WORKER="+strconv.Itoa(n))
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with the scenario if it dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fila work: %w", err)
	}
	w := &workerProc{n: n, cmd: cmd, logf: logf, exited: make(chan struct{})}
	go func() { w.err = cmd.Wait(); close(w.exited) }()
	return w, nil
}

func (w *workerProc) pid() int { return w.cmd.Process.Pid }

func (w *workerProc) signal(sig syscall.Signal) error { return w.cmd.Process.Signal(sig) }

func (w *workerProc) running() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// kill kills the process if it still runs and waits for it.
func (w *workerProc) kill() {
	if w.running() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die of SIGKILL promptly
		_ = w.cmd.Process.Kill()
	}
	<-w.exited
}

// log returns the process's output.
func (w *workerProc) log() string {
	b, _ := os.ReadFile(w.logf)
	return string(b)
}

// loggedAt returns when the process first logged msg (its JSON log's ts),
// or false if it did not.
func (w *workerProc) loggedAt(msg string) (time.Time, bool) {
	for _, line := range strings.Split(w.log(), "\n") {
		var entry struct {
			Msg string `json:"msg"`
			TS  string `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != msg {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, entry.TS); err == nil {
			return ts, true
		}
	}
	return time.Time{}, false
}

// logTail is the end of the output, for a failure note.
func (w *workerProc) logTail() string {
	s := w.log()
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// waitListening waits until n listeners (one per worker process) listen on db.
func (e *Env) waitListening(ctx context.Context, db *database, n int) error {
	ok := waitFor(ctx, 60*time.Second, func() bool {
		var got int
		_ = db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1::text AND application_name = $2::text`,
			db.name, listener.ApplicationName).Scan(&got)
		return got >= n
	})
	if !ok {
		return fmt.Errorf("%d worker processes did not all listen within 60s", n)
	}
	return nil
}

// jobStates returns each job's state and attempts.
func jobStates(ctx context.Context, db *database) (map[int64]jobRow, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, kind, state, attempts, coalesce(last_error, ''), lease_until > now(),
		run_at, lease_until, greatest(started_at, heartbeat_at) FROM fila_jobs`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]jobRow{}
	for rows.Next() {
		var id int64
		var r jobRow
		var live *bool
		if err := rows.Scan(&id, &r.kind, &r.state, &r.attempts, &r.lastError, &live, &r.runAt, &r.leaseUntil, &r.renewed); err != nil {
			return nil, err
		}
		r.liveLease = live != nil && *live
		out[id] = r
	}
	return out, rows.Err()
}

type jobRow struct {
	kind      string
	state     string
	attempts  int
	lastError string
	liveLease bool
	// On the database clock: when the job is due (a rescue sets it to the
	// rescue's time), when its lease ends (nil when it holds none), and when
	// its running attempt's lease was last set (its claim or its latest
	// heartbeat; nil if it never ran).
	runAt      time.Time
	leaseUntil *time.Time
	renewed    *time.Time
}

// scenarioDir is a temporary directory for run files and worker logs.
func scenarioDir(name string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "fila-chaos-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	// Shell commands of `fila work --exec` append to files here.
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// fila runs one `fila` command (not a worker) on db and returns its stdout,
// or an error with its stderr.
func (e *Env) fila(ctx context.Context, db *database, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.FilaBin, args...)
	cmd.Env = append(os.Environ(), "FILA_DSN="+db.dsn, "FILA_LISTEN_DSN="+db.direct)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fila %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
