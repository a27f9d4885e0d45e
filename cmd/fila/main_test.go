package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/migrations"
)

// filaBin is the fila binary the tests run as real processes.
var filaBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fila-cmd-test-")
	if err != nil {
		panic(err)
	}
	filaBin = filepath.Join(dir, "fila")
	out, err := exec.Command("go", "build", "-o", filaBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build fila: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Shared with the other packages' tests (internal/testrt).
var (
	migrated = testrt.Migrated
	waitFor  = testrt.WaitFor
)

// fila runs the binary to completion.
func fila(t *testing.T, db *testdb.DB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return filaStdin(t, db, "", args...)
}

// filaStdin runs the binary to completion with stdin as its standard input.
func filaStdin(t *testing.T, db *testdb.DB, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := filaCmd(db, args...)
	var o, e bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return o.String(), e.String(), code
}

func filaCmd(db *testdb.DB, args ...string) *exec.Cmd {
	cmd := exec.Command(filaBin, args...)
	cmd.Env = append(os.Environ(), "FILA_DSN="+db.DSN, "FILA_LISTEN_DSN="+db.DirectDSN)
	return cmd
}

// startWorker starts `fila work` and stops it (SIGKILL if still running) at
// the end of the test. Its output goes to the test log on failure.
func startWorker(t *testing.T, db *testdb.DB, args ...string) *exec.Cmd {
	t.Helper()
	w := startWorkerOutput(t, db, args...)
	return w.cmd
}

// worker is a running `fila work` whose output the test reads.
type worker struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
}

// startWorkerOutput is startWorker keeping the worker's stdout and stderr
// apart, for the test to read while it runs.
func startWorkerOutput(t *testing.T, db *testdb.DB, args ...string) *worker {
	t.Helper()
	cmd := filaCmd(db, append([]string{"work", "--log-format", "json"}, args...)...)
	w := &worker{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker %d stdout:\n%s\nstderr:\n%s", cmd.Process.Pid, w.stdout.String(), w.stderr.String())
		}
	})
	return w
}

// lockedBuffer is a bytes.Buffer a test may read while a process writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMigrateTwiceAtOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	a, b := filaCmd(db, "migrate"), filaCmd(db, "migrate")
	var ao, bo bytes.Buffer
	a.Stderr, b.Stderr = &ao, &bo
	require.NoError(t, a.Start())
	require.NoError(t, b.Start())
	require.NoError(t, a.Wait(), ao.String())
	require.NoError(t, b.Wait(), bo.String())
	v, err := migrations.Version(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, migrations.Latest(), v)
	_, _, code := fila(t, db, "migrate")
	require.Zero(t, code)
}

func TestBadInputGetsOneLineErrors(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--kind", "never-registered"}, `no worker handles kind "never-registered"`},
		{[]string{"enqueue", "--kind", "noop", "--payload", "{oops"}, "--payload is not valid JSON"},
		{[]string{"enqueue", "--kind", "noop", "--queue", "has space", "--allow-unknown-kind"}, "queue name"},
		{[]string{"enqueue", "--kind", "noop", "--run-at", "tomorrow"}, "--run-at"},
		{[]string{"enqueue", "--kynd", "noop"}, "flag provided but not defined: -kynd"},
		{[]string{"--dsn", "postgres://postgres@127.0.0.1:1/nowhere", "stats"}, "cannot reach the database"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"work", "--exec", "noequals"}, "want KIND=COMMAND"},
		{[]string{"work", "--mode", "smoke"}, `--mode: "smoke" is not one of notify, poll, wal`},
	}
	for _, c := range cases {
		out, errOut, code := fila(t, db, c.args...)
		require.NotZero(t, code, "%v should fail", c.args)
		require.Empty(t, out)
		line := strings.TrimSpace(errOut)
		require.NotContains(t, line, "\n", "%v: error is not one line: %s", c.args, errOut)
		require.Contains(t, line, c.want, "%v", c.args)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n, "nothing is enqueued by a refused command")
}

func TestExecHandlerContract(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	startWorker(t, db,
		"--exec", fmt.Sprintf(`ok=cat > %s/$FILA_JOB_ID.in; env | grep ^FILA_JOB_ | sort > %s/$FILA_JOB_ID.env`, dir, dir),
		"--exec", "bad=echo the payload lacks a field >&2; exit 65",
		"--exec", "flaky=echo temporary trouble >&2; exit 1",
		"--timeout", "slow=200ms", "--exec", "slow=sleep 30")
	waitFor(t, 60*time.Second, "worker registered its kinds", func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_kinds").Scan(&n)
		return n >= 4
	})
	id := func(args ...string) string {
		out, errOut, code := fila(t, db, append([]string{"enqueue"}, args...)...)
		require.Zero(t, code, errOut)
		return strings.TrimSpace(out)
	}
	okID := id("--kind", "ok", "--payload", `{"to":"ana"}`)
	badID := id("--kind", "bad")
	flakyID := id("--kind", "flaky", "--max-attempts", "2")
	slowID := id("--kind", "slow", "--max-attempts", "1")
	state := func(id string) (s, le string) {
		var l *string
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			"SELECT state, last_error FROM fila_jobs WHERE id = $1::bigint", id).Scan(&s, &l))
		if l != nil {
			le = *l
		}
		return
	}
	waitFor(t, 60*time.Second, "all jobs finished", func() bool {
		for _, id := range []string{okID, badID, flakyID, slowID} {
			if s, _ := state(id); s != "completed" && s != "dead" {
				return false
			}
		}
		return true
	})
	s, _ := state(okID)
	require.Equal(t, "completed", s)
	in, err := os.ReadFile(filepath.Join(dir, okID+".in"))
	require.NoError(t, err)
	require.JSONEq(t, `{"to":"ana"}`, string(in))
	env, err := os.ReadFile(filepath.Join(dir, okID+".env"))
	require.NoError(t, err)
	require.Contains(t, string(env), "FILA_JOB_ID="+okID)
	require.Contains(t, string(env), "FILA_JOB_KIND=ok")
	require.Contains(t, string(env), "FILA_JOB_QUEUE=default")
	require.Contains(t, string(env), "FILA_JOB_ATTEMPT=1")

	s, le := state(badID)
	require.Equal(t, "dead", s)
	require.Contains(t, le, "the payload lacks a field")
	s, le = state(flakyID)
	require.Equal(t, "dead", s)
	require.Contains(t, le, "temporary trouble")
	s, le = state(slowID)
	require.Equal(t, "dead", s)
	require.Contains(t, le, "timed out after 200ms")
}

func TestPsqlInsertsArePickedUpByWorker(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	startWorker(t, db, "--safety-poll", "10m")
	ctx := context.Background()
	waitFor(t, 60*time.Second, "worker listening", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fila-listener'").Scan(&n)
		return n == 1
	})
	for i := 0; i < 20; i++ {
		_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) VALUES ('noop')`)
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "all picked up (the safety poll is 10 minutes: only notifications explain it)", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == 20
	})
	var p50 float64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at) * 1000) FROM fila_jobs`).Scan(&p50))
	t.Logf("pickup p50 on the database clock: %.2f ms", p50)
}

func TestKilledWorkerJobRunsAgainAfterLease(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	// The first attempt hangs, with a grandchild in a session (and process
	// group) of its own, which does not hold the worker's output open;
	// later ones finish at once. Each records the process group its
	// command runs in (field 5 of /proc/self/stat).
	grandchild := filepath.Join(dir, "grandchild")
	command := fmt.Sprintf(`echo "$FILA_JOB_ID $FILA_JOB_ATTEMPT $(cut -d' ' -f5 /proc/self/stat)" >> %s; if [ "$FILA_JOB_ATTEMPT" = 1 ]; then setsid sh -c 'echo $$ > %s; exec sleep 120' >/dev/null 2>&1 & sleep 120; fi`, runs, grandchild)
	victim := startWorker(t, db, "--lease", "5s", "--exec", "job="+command)
	ctx := context.Background()
	var other int64
	waitFor(t, 60*time.Second, "victim registered", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_kinds WHERE kind = 'job'").Scan(&n)
		return n == 1
	})
	out, errOut, code := fila(t, db, "enqueue", "--kind", "job")
	require.Zero(t, code, errOut)
	id := strings.TrimSpace(out)
	// Another job that must not be touched by the crash.
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, run_at) VALUES ('job', now() + interval '1 hour') RETURNING id`).Scan(&other))
	waitFor(t, 30*time.Second, "first attempt running", func() bool {
		b, _ := os.ReadFile(runs)
		return strings.Contains(string(b), id+" 1 ")
	})
	b, err := os.ReadFile(runs)
	require.NoError(t, err)
	fields := strings.Fields(strings.Split(string(b), "\n")[0])
	require.Len(t, fields, 3)
	pgid, err := strconv.Atoi(fields[2])
	require.NoError(t, err)
	require.NotEqual(t, victim.Process.Pid, pgid, "the command runs in a process group of its own")
	require.Positive(t, processesInGroup(t, pgid), "the hung command is running before the kill")
	grandchildPid := readPids(t, grandchild, 1)
	require.Len(t, alive(grandchildPid), 1, "the grandchild is running before the kill")
	// Killed once a heartbeat recorded that it runs the job, so the attempt
	// counts (the attempt of a worker killed before that is given back).
	waitFor(t, 30*time.Second, "the victim heartbeated the job", func() bool {
		var seen bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT coalesce(heartbeat_at >= started_at, false) FROM fila_jobs WHERE id = $1::bigint", id).Scan(&seen))
		return seen
	})
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	killed := time.Now()

	startWorker(t, db, "--lease", "5s", "--exec", "job="+command)
	waitFor(t, 60*time.Second, "job completed by the second worker", func() bool {
		var s string
		_ = db.Pool.QueryRow(ctx, "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&s)
		return s == "completed"
	})
	t.Logf("completed %.1fs after the kill (lease 5s)", time.Since(killed).Seconds())
	var attempts int
	var lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT attempts, coalesce(last_error, '') FROM fila_jobs WHERE id = $1::bigint", id).Scan(&attempts, &lastErr))
	// Attempt 2 is the rescue. On a loaded machine the second worker's own
	// renewals can fail to return in time, and it stops its attempt before
	// the lease ends, as it must: then a third attempt completes the job.
	require.GreaterOrEqual(t, attempts, 2)
	require.Contains(t, lastErr, "lease expired")
	b, err = os.ReadFile(runs)
	require.NoError(t, err)
	var lines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, id+" ") {
			lines = append(lines, l)
			attempt := strings.Fields(l)[1]
			require.False(t, seen[attempt], "attempt %s ran twice: %s", attempt, b)
			seen[attempt] = true
		}
	}
	require.True(t, seen["1"] && seen[strconv.Itoa(attempts)], "the first and the last attempt ran: %s", b)
	require.LessOrEqual(t, len(lines), attempts, "at most one run per attempt: %s", b)
	var otherState string
	var otherAttempts int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, attempts FROM fila_jobs WHERE id = $1::bigint", other).Scan(&otherState, &otherAttempts))
	require.Equal(t, "pending", otherState)
	require.Zero(t, otherAttempts)
	// The hung first attempt's command, and everything it started, died
	// with its worker.
	waitFor(t, 15*time.Second, "the killed worker's command's process group is gone", func() bool {
		return processesInGroup(t, pgid) == 0
	})
	waitFor(t, 15*time.Second, "the killed worker's command's grandchild in a session of its own is gone", func() bool {
		return len(alive(grandchildPid)) == 0
	})
}

// processesInGroup counts the live processes of process group pgid.
func processesInGroup(t *testing.T, pgid int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	n := 0
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp …: comm may hold spaces, so count from
		// its closing parenthesis.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 2 && fields[2] == strconv.Itoa(pgid) && fields[0] != "Z" {
			n++
		}
	}
	return n
}

func TestSixWorkerProcessesRunEachJobOnce(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	for i := 0; i < 6; i++ {
		startWorker(t, db, "--concurrency", "8", "--exec", fmt.Sprintf(`job=echo "$FILA_JOB_ID %d" >> %s`, i, runs))
	}
	ctx := context.Background()
	waitFor(t, 60*time.Second, "workers registered", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_kinds WHERE kind = 'job'").Scan(&n)
		return n == 1
	})
	// Each job is a shell of its own: 600 keep all six workers claiming at
	// once for seconds, and 3 000 cost 85 s of process start-ups.
	const jobs = 600
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'job' FROM generate_series(1, $1::int)`, jobs)
	require.NoError(t, err)
	waitFor(t, 300*time.Second, "all jobs completed", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == jobs
	})
	b, err := os.ReadFile(runs)
	require.NoError(t, err)
	seen := map[string]int{}
	workers := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 2, "line %q", line)
		seen[f[0]]++
		workers[f[1]] = true
	}
	require.Len(t, seen, jobs)
	for id, n := range seen {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	require.Greater(t, len(workers), 1, "the work was shared between processes")
}

func TestSIGTERMFinishesRunningJobThenSecondSignalCancels(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	wk := startWorkerOutput(t, db, "--shutdown-timeout", "1m")
	w := wk.cmd
	waitFor(t, 60*time.Second, "worker registered", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_kinds WHERE kind = 'sleep'").Scan(&n)
		return n == 1
	})
	var short, long int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('sleep', '{"ms": 500}') RETURNING id`).Scan(&short))
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('sleep', '{"ms": 600000}') RETURNING id`).Scan(&long))
	waitFor(t, 30*time.Second, "both running", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'running'").Scan(&n)
		return n == 2
	})
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	first := time.Now()
	// The same signal again at once is the same stop (sent to the process
	// and its group): it must not cancel anything.
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	waitFor(t, 30*time.Second, "short job finished during the drain", func() bool {
		var s string
		_ = db.Pool.QueryRow(ctx, "SELECT state FROM fila_jobs WHERE id = $1::bigint", short).Scan(&s)
		return s == "completed"
	})
	var st string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state FROM fila_jobs WHERE id = $1::bigint", long).Scan(&st))
	require.Equal(t, "running", st, "the signal repeated at once cancelled the long job")
	time.Sleep(time.Until(first.Add(2 * hardStopGap))) // a second signal is one that comes later
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), "exit status after a graceful then hard stop")
	var s string
	var lease *time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, lease_until FROM fila_jobs WHERE id = $1::bigint", long).Scan(&s, &lease))
	require.Equal(t, "pending", s, "the cancelled job went back to the queue at once")
	require.Nil(t, lease)
	logs := wk.stderr.String()
	require.Contains(t, logs, "second signal: cancelling running jobs")
	require.NotContains(t, logs, "deadline", "a second signal is not a deadline passing")
}
