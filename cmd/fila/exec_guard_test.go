package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// treeCommand is an --exec command whose first attempt starts a tree that
// tries every way out of its process group and of its parent, recording
// each process's pid in DIR/JOB_ID.pids, then runs rest: a background
// child, a grandchild in a session of its own (setsid), a double-forked
// grandchild orphaned at once, and one that ignores SIGTERM. Later attempts
// exit 0 at once.
func treeCommand(dir, rest string) string {
	pids := dir + "/$FILA_JOB_ID.pids"
	return `[ "$FILA_JOB_ATTEMPT" = 1 ] || exit 0
P=` + pids + `; export P
echo $$ >> $P
sleep 61 & echo $! >> $P
setsid sh -c 'echo $$ >> $P; exec sleep 62' &
( sh -c 'echo $$ >> $P; exec sleep 63' & )
sh -c 'trap "" TERM; echo $$ >> $P; sleep 64' &
while [ "$(wc -l < $P)" -lt 5 ]; do sleep 0.01; done
` + rest
}

// treePids is how many processes treeCommand records.
const treePids = 5

// readPids reads the pids in file, once it holds n of them.
func readPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, 30*time.Second, fmt.Sprintf("%d pids in %s", n, file), func() bool {
		b, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
		return len(pids) >= n
	})
	t.Cleanup(func() {
		for _, pid := range alive(pids) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// alive lists those of pids that still run; a zombie is dead.
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// enqueueJob enqueues one job of kind and returns its id.
func enqueueJob(t *testing.T, db *testdb.DB, args ...string) string {
	t.Helper()
	out, errOut, code := fila(t, db, append([]string{"enqueue"}, args...)...)
	require.Zero(t, code, errOut)
	return strings.TrimSpace(out)
}

// waitKinds waits until a worker registered n kinds.
func waitKinds(t *testing.T, db *testdb.DB, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, "worker registered its kinds", func() bool {
		var got int
		_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_kinds").Scan(&got)
		return got >= n
	})
}

// A worker frozen by SIGSTOP (Ctrl-Z, a paused container) renews no lease,
// and cannot stop its command either: the command's guard kills the whole
// tree at the attempt's deadline, before the lease that another worker
// would rescue the job after runs out. The worker is stopped at random
// points of its heartbeat cycle.
func TestStoppedWorkerCommandDiesBeforeItsLease(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	const lease = 2 * time.Second
	w := startWorker(t, db, "--lease", lease.String(), "--concurrency", "4", "--exec", "job="+treeCommand(dir, "sleep 60"))
	waitKinds(t, db, 1)
	ctx := context.Background()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			_ = w.Process.Signal(syscall.SIGCONT)
		}
	})
	var worst time.Duration
	for round := range 4 {
		id := enqueueJob(t, db, "--kind", "job")
		pids := readPids(t, filepath.Join(dir, id+".pids"), treePids)
		// Once a heartbeat recorded that the worker runs the attempt (one
		// stopped before is given back uncounted), at a random point of the
		// heartbeat cycle (Lease/3).
		waitFor(t, 30*time.Second, "the worker heartbeated the job", func() bool {
			var seen bool
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT coalesce(heartbeat_at >= started_at, false) FROM fila_jobs WHERE id = $1::bigint", id).Scan(&seen))
			return seen
		})
		pause := rand.N(lease / 3)
		time.Sleep(pause)
		require.NoError(t, w.Process.Signal(syscall.SIGSTOP))
		stopped = true
		// Until the lease has run out on the database clock, and a second
		// more: long enough for the command to outlive it if nothing stops
		// it. The lease is read while the worker is stopped: a heartbeat
		// sent just before the stop may still have moved it, and nothing
		// moves it after.
		// The wait ends on its own a second after the lease on the database
		// clock; its deadline only bounds a database that stopped answering.
		var left time.Duration
		var dead bool
		waitFor(t, lease+time.Minute, "the command dead, or the lease a second past", func() bool {
			dead = len(alive(pids)) == 0
			var leaseUntil, now time.Time
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT lease_until, clock_timestamp() FROM fila_jobs WHERE id = $1::bigint", id).Scan(&leaseUntil, &now))
			left = leaseUntil.Sub(now)
			return dead || left < -time.Second
		})
		require.True(t, dead, "round %d (stopped %s into the cycle): the command's processes %v outlived the lease of the stopped worker by %s",
			round, pause.Round(time.Millisecond), alive(pids), -left)
		require.Positive(t, left, "round %d: the tree died after the lease ran out", round)
		t.Logf("round %d: stopped %s after the heartbeat was seen; every process of the command was dead %s before the lease ran out",
			round, pause.Round(time.Millisecond), left.Round(time.Millisecond))
		if round == 0 || left < worst {
			worst = left
		}
		require.NoError(t, w.Process.Signal(syscall.SIGCONT))
		stopped = false
	}
	t.Logf("closest: dead %s before the lease ran out (lease %s, the attempt ends a sixth of it before)", worst.Round(time.Millisecond), lease)
}

// A cancelled or timed-out command ends with all its descendants, those
// that left its process group or were orphaned included.
func TestCancelledOrTimedOutCommandLeavesNoDescendant(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	w := startWorkerOutput(t, db, "--lease", "3s",
		"--exec", "tree="+treeCommand(dir, "sleep 60"),
		"--timeout", "timed=500ms", "--exec", "timed="+treeCommand(dir, "sleep 60"))
	waitKinds(t, db, 2)
	ctx := context.Background()

	id := enqueueJob(t, db, "--kind", "tree")
	pids := readPids(t, filepath.Join(dir, id+".pids"), treePids)
	require.Len(t, alive(pids), treePids)
	out, errOut, code := fila(t, db, "jobs", "cancel", id)
	require.Zero(t, code, errOut+out)
	waitFor(t, 30*time.Second, "the worker saw the cancellation and the handler returned", func() bool {
		return strings.Contains(w.stderr.String(), "job cancelled while it ran")
	})
	require.Empty(t, alive(pids), "processes of the cancelled command outlived its attempt")

	id = enqueueJob(t, db, "--kind", "timed", "--max-attempts", "1")
	pids = readPids(t, filepath.Join(dir, id+".pids"), treePids)
	var state, lastErr string
	waitFor(t, 30*time.Second, "the timed-out job is dead", func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state, coalesce(last_error, '') FROM fila_jobs WHERE id = $1::bigint", id).Scan(&state, &lastErr))
		return state == "dead"
	})
	require.Empty(t, alive(pids), "processes of the timed-out command outlived its attempt")
	require.Contains(t, lastErr, "timed out after 500ms")
}

// A command's exit ends its attempt: a background child holding its
// stdout and stderr open neither keeps the attempt running nor makes it
// fail, and does not outlive it.
func TestBackgroundChildDoesNotHoldTheAttempt(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	dir := t.TempDir()
	w := startWorkerOutput(t, db, "--exec", fmt.Sprintf(`bg=sleep 60 & echo $! > %s/$FILA_JOB_ID.pids; echo started $FILA_JOB_ID`, dir))
	waitKinds(t, db, 1)
	id := enqueueJob(t, db, "--kind", "bg")
	pids := readPids(t, filepath.Join(dir, id+".pids"), 1)
	var state string
	var attempts int
	var took time.Duration
	waitFor(t, 30*time.Second, "the job finished", func() bool {
		var ms float64
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			"SELECT state, attempts, coalesce(extract(epoch FROM finished_at - started_at) * 1000, 0) FROM fila_jobs WHERE id = $1::bigint", id).
			Scan(&state, &attempts, &ms))
		took = time.Duration(ms * float64(time.Millisecond))
		return state == "completed" || attempts > 1
	})
	require.Equal(t, "completed", state)
	require.Equal(t, 1, attempts, "completed at its first attempt")
	// The child lives 60 s; the attempt may wait a moment for the output
	// the child holds open (a second, longer on a loaded machine), never
	// for the child itself.
	require.Less(t, took, 30*time.Second, "the attempt ended with the command, not with its background child")
	require.Empty(t, alive(pids), "the background child outlived the attempt")
	require.Contains(t, w.stdout.String(), "started "+id)
	t.Logf("attempt took %s on the database clock", took.Round(time.Millisecond))
}

// The guard is not a command of the list, and run by hand it says what it
// is for.
func TestExecGuardIsHidden(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(filaBin, "help").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "work")
	require.NotContains(t, string(out), execGuardCommand)
	cmd := exec.Command(filaBin, execGuardCommand)
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.Contains(t, string(out), "runs only under fila work --exec")
}
