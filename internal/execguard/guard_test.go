package execguard

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
	"go.uber.org/goleak"

	"github.com/fila-run/fila/internal/testwait"
)

// guardEnv makes the test binary the guard: these tests start it as the
// guard process, the way fila starts itself as `fila exec-guard`.
// workerEnv makes it a worker that runs one command under a guard and
// waits to be killed.
const (
	guardEnv  = "EXECGUARD_TEST_RUN_GUARD"
	workerEnv = "EXECGUARD_TEST_RUN_WORKER"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(guardEnv) == "1":
		os.Exit(Main())
	case os.Getenv(workerEnv) != "":
		runWorker(os.Getenv(workerEnv))
		return
	}
	goleak.VerifyTestMain(m)
}

// newTestPool is a pool of guards that are this test binary.
func newTestPool(t *testing.T, stdout io.Writer) *Pool {
	p := NewPool(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), guardEnv+"=1")
		cmd.Stdout = stdout
		return cmd
	}, 1)
	if t != nil {
		t.Cleanup(p.Close)
	}
	return p
}

// runWorker runs command under a guard with a far deadline, and, once the
// pool started a guard waiting for the next job, writes its pid to
// $DIR/idle; then says how the command ended and exits. With $ADOPT set,
// it adopts orphans first, as fila work does.
func runWorker(command string) {
	if os.Getenv("ADOPT") != "" {
		if err := AdoptOrphans(); err != nil {
			panic(err)
		}
	}
	p := newTestPool(nil, os.Stdout)
	go func() {
		// The pool keeps an idle process once it has started one; the test
		// waits for this file, with its own deadline.
		var pid int
		if testwait.For(time.Hour, func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.idle) == 0 {
				return false
			}
			pid = p.idle[0].cmd.Process.Pid
			return true
		}) {
			_ = os.WriteFile(filepath.Join(os.Getenv("DIR"), "idle"), []byte(strconv.Itoa(pid)), 0o644)
		}
	}()
	end, err := p.Run(context.Background(), Attempt{Command: command, Stderr: os.Stderr,
		OwnedUntil: func() time.Time { return time.Now().Add(time.Hour) }})
	fmt.Fprintln(os.Stderr, "the command ended:", end, err)
	os.Exit(1)
}

// lockedBuffer is a bytes.Buffer the guard's output is copied into while a
// test reads it.
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

// run is one guarded command.
type run struct {
	stdout, stderr *lockedBuffer
	dir            string // $DIR of the command, where it writes its pids
	done           chan struct{}
	end            End
	err            error
}

// deadline is a movable attempt deadline, as a runtime.Job keeps it.
type deadline struct {
	mu      sync.Mutex
	at      time.Time
	renewed chan struct{}
}

func newDeadline(at time.Time) *deadline {
	return &deadline{at: at, renewed: make(chan struct{}, 1)}
}

func (d *deadline) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

func (d *deadline) set(at time.Time) {
	d.mu.Lock()
	d.at = at
	d.mu.Unlock()
	select {
	case d.renewed <- struct{}{}:
	default:
	}
}

// start runs command under a guard of a pool of its own with the attempt
// deadline d; stdin is its standard input. $DIR is a directory of its own.
func start(t *testing.T, ctx context.Context, command, stdin string, d *deadline) *run {
	t.Helper()
	r := &run{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, dir: t.TempDir(), done: make(chan struct{})}
	p := newTestPool(t, r.stdout)
	go func() {
		defer close(r.done)
		r.end, r.err = p.Run(ctx, Attempt{Command: command, Env: []string{"DIR=" + r.dir}, Stdin: []byte(stdin),
			Stderr: r.stderr, OwnedUntil: d.get, Renewed: d.renewed})
	}()
	t.Cleanup(func() {
		for _, pid := range r.pids(t) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-r.done
	})
	return r
}

// wait waits for the command to end.
func (r *run) wait(t *testing.T) (End, error) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the guard did not exit within 30s")
	}
	return r.end, r.err
}

// treeCommand starts a tree that tries every way out of its process group
// and of its parent, records each process's pid in $DIR/pids, then runs
// rest: a background child, a grandchild in a session of its own (setsid),
// a double-forked grandchild orphaned at once, and one that ignores
// SIGTERM.
func treeCommand(rest string) string {
	return `echo $$ >> $DIR/pids
sleep 61 & echo $! >> $DIR/pids
setsid sh -c 'echo $$ >> $DIR/pids; exec sleep 62' &
( sh -c 'echo $$ >> $DIR/pids; exec sleep 63' & )
sh -c 'trap "" TERM; echo $$ >> $DIR/pids; sleep 64' &
while [ "$(wc -l < $DIR/pids)" -lt 5 ]; do sleep 0.01; done
` + rest
}

// pids reads the pids the command recorded.
func (r *run) pids(t *testing.T) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, "pids"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// waitPids waits until the command recorded n pids.
func (r *run) waitPids(t *testing.T, n int) []int {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d pids recorded", n), func() bool { return len(r.pids(t)) >= n })
	return r.pids(t)
}

// alive lists those of pids that still run (a zombie is dead).
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

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, limit, what, cond)
}

func TestCommandExitEndsAttemptAndKillsWhatItLeft(t *testing.T) {
	t.Parallel()
	r := start(t, context.Background(), treeCommand("echo started; exit 3"), "", newDeadline(time.Now().Add(time.Minute)))
	began := time.Now()
	end, err := r.wait(t)
	require.NoError(t, err)
	took := time.Since(began)
	require.Equal(t, End{How: Exited, Code: 3}, end)
	require.Equal(t, "started\n", r.stdout.String())
	pids := r.pids(t)
	require.Len(t, pids, 5)
	require.Empty(t, alive(pids), "every process the command left is dead when the guard exits")
	require.Less(t, took, 3*time.Second, "its children held stdout and stderr open, yet the attempt ended with the command")
}

func TestStdinStdoutStderrAndSignals(t *testing.T) {
	t.Parallel()
	far := newDeadline(time.Now().Add(time.Minute))
	r := start(t, context.Background(), `cat; echo to stderr >&2`, `{"a": 1}`, far)
	end, err := r.wait(t)
	require.NoError(t, err)
	require.Equal(t, End{How: Exited, Code: 0}, end)
	require.Equal(t, `{"a": 1}`, r.stdout.String())
	require.Equal(t, "to stderr\n", r.stderr.String())

	r = start(t, context.Background(), `kill -TERM $$`, "", far)
	end, err = r.wait(t)
	require.NoError(t, err)
	require.Equal(t, End{How: Signalled, Code: int(syscall.SIGTERM)}, end)
	require.Equal(t, "signal: terminated", end.String())
}

// The command holds only what it was given: not the control socket, whose
// end of file tells the guard its worker died.
func TestCommandDoesNotHoldTheControlSocket(t *testing.T) {
	t.Parallel()
	// A few at once, so that each guard would also see the others' sockets
	// were they inherited.
	var runs []*run
	for range 4 {
		runs = append(runs, start(t, context.Background(),
			`echo $PPID; for f in /proc/$$/fd/* /proc/$PPID/fd/*; do echo "$f $(readlink $f)"; done`, "", newDeadline(time.Now().Add(time.Minute))))
	}
	for _, r := range runs {
		_, err := r.wait(t)
		require.NoError(t, err)
		guard, listing, _ := strings.Cut(r.stdout.String(), "\n")
		var sockets []string
		for _, l := range strings.Split(listing, "\n") {
			if strings.Contains(l, "socket:") {
				sockets = append(sockets, l)
			}
		}
		// The guard (the command's parent) holds its own end, fd 3, and
		// nothing else; the command holds none.
		require.Len(t, sockets, 1, "%s", listing)
		require.Contains(t, sockets[0], "/proc/"+guard+"/fd/3 ")
	}
}

// A worker that sends nothing more — frozen, or its goroutines not running —
// cannot keep the command alive past the deadline it sent.
func TestDeadlineKillsTreeWithoutWorker(t *testing.T) {
	t.Parallel()
	// The tree is up before the last deadline is sent: a loaded machine
	// may take longer than that deadline to start five processes.
	d := newDeadline(time.Now().Add(time.Minute))
	r := start(t, context.Background(), treeCommand("sleep 60"), "", d)
	pids := r.waitPids(t, 5)
	require.Len(t, alive(pids), 5)
	d.set(time.Now().Add(700 * time.Millisecond))
	end, err := r.wait(t)
	ended := time.Now()
	require.NoError(t, err)
	require.Equal(t, End{How: Deadline}, end)
	require.Empty(t, alive(pids))
	require.False(t, ended.Before(d.get()), "killed %s before its deadline", d.get().Sub(ended))
	t.Logf("guard exited %s after the deadline", ended.Sub(d.get()))
}

func TestRenewalsMoveTheDeadline(t *testing.T) {
	t.Parallel()
	// Each renewal gives five seconds and comes every tenth of a second
	// for three: only a guard starved of its renewals for five seconds
	// could end before the last one, as a loaded machine starved one of
	// them for a second.
	const step = 5 * time.Second
	d := newDeadline(time.Now().Add(step))
	r := start(t, context.Background(), "sleep 60", "", d)
	renewUntil := time.Now().Add(3 * time.Second)
	for time.Now().Before(renewUntil) {
		time.Sleep(100 * time.Millisecond)
		d.set(time.Now().Add(step))
	}
	last := d.get()
	end, err := r.wait(t)
	ended := time.Now()
	require.NoError(t, err)
	require.Equal(t, End{How: Deadline}, end)
	require.False(t, ended.Before(last), "killed %s before the last deadline sent", last.Sub(ended))
}

func TestDeadlinePassedBeforeStart(t *testing.T) {
	t.Parallel()
	r := start(t, context.Background(), `touch $DIR/ran`, "", newDeadline(time.Now().Add(-time.Millisecond)))
	end, err := r.wait(t)
	require.NoError(t, err)
	require.Equal(t, End{How: Deadline}, end)
	require.NoFileExists(t, filepath.Join(r.dir, "ran"))
}

func TestCancelKillsTree(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := start(t, ctx, treeCommand("sleep 60"), "", newDeadline(time.Now().Add(time.Minute)))
	pids := r.waitPids(t, 5)
	cancel()
	began := time.Now()
	end, err := r.wait(t)
	require.NoError(t, err)
	require.Equal(t, End{How: Cancelled}, end)
	require.Empty(t, alive(pids))
	require.Less(t, time.Since(began), 3*time.Second)

	_, err = newTestPool(t, io.Discard).Run(ctx, Attempt{Command: "true", OwnedUntil: time.Now})
	require.ErrorIs(t, err, context.Canceled, "a cancelled attempt does not start")
}

func TestSignalledGuardKillsTree(t *testing.T) {
	t.Parallel()
	r := start(t, context.Background(), `echo $PPID > $DIR/guard; `+treeCommand("sleep 60"), "", newDeadline(time.Now().Add(time.Minute)))
	pids := r.waitPids(t, 5)
	b, err := os.ReadFile(filepath.Join(r.dir, "guard"))
	require.NoError(t, err)
	guard, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(guard, syscall.SIGTERM))
	end, err := r.wait(t)
	require.NoError(t, err)
	require.Equal(t, End{How: Terminated, Code: int(syscall.SIGTERM)}, end)
	require.Empty(t, alive(pids))
}

// A worker that dies, even by SIGKILL, closes its end of the control
// sockets: the tree of the command it ran dies at once, and the guard it
// kept waiting exits.
func TestKilledWorkerKillsTreeAndIdleGuard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := exec.Command(os.Args[0])
	w.Env = append(os.Environ(), workerEnv+"="+treeCommand("sleep 60"), "DIR="+dir)
	var out lockedBuffer
	w.Stdout, w.Stderr = &out, &out
	require.NoError(t, w.Start())
	r := &run{dir: dir}
	pids := r.waitPids(t, 5)
	var idle int
	waitFor(t, 10*time.Second, "the worker has a guard waiting", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "idle"))
		idle, _ = strconv.Atoi(string(b))
		return idle > 0
	})
	require.NoError(t, w.Process.Kill())
	_ = w.Wait()
	waitFor(t, 5*time.Second, "the tree and the waiting guard are dead", func() bool {
		return len(alive(append(pids, idle))) == 0
	})
	require.NotContains(t, out.String(), "the command ended")
}

// A waiting guard that died is not handed a job; Close lets the others go.
func TestPoolSkipsDeadGuardsAndCloses(t *testing.T) {
	t.Parallel()
	p := newTestPool(t, io.Discard)
	run := func() {
		end, err := p.Run(context.Background(), Attempt{Command: "true", OwnedUntil: func() time.Time { return time.Now().Add(time.Minute) }})
		require.NoError(t, err)
		require.Equal(t, End{How: Exited}, end)
	}
	run()
	var idle *guardProc
	waitFor(t, 10*time.Second, "a guard waits", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.idle) > 0 {
			idle = p.idle[0]
		}
		return idle != nil
	})
	require.NoError(t, idle.cmd.Process.Signal(syscall.SIGKILL))
	waitFor(t, 10*time.Second, "the waiting guard is dead", func() bool { return !idle.waiting() })
	run()
	p.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.idle)
}

func TestRunByHandIsRefused(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), guardEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.Contains(t, string(out), "runs only under fila work --exec")
}

func TestEndRoundTrips(t *testing.T) {
	for _, e := range []End{{How: Exited, Code: 0}, {How: Exited, Code: 65}, {How: Signalled, Code: 9},
		{How: Deadline}, {How: Cancelled}, {How: Terminated, Code: 15}, {How: Failed, Detail: "start /bin/sh: no such file"},
		{How: Failed, Detail: "a detail that ends with the word last"}} {
		got, ok := parseEnd(e.encode() + "\n")
		require.True(t, ok, "%v", e)
		require.Equal(t, e, got)
		for _, last := range []bool{false, true} {
			line := e.encode()
			if last {
				line = lastWord + " " + line
			}
			got, gotLast, ok := parseReport(line)
			require.True(t, ok, "%q", line)
			require.Equal(t, e, got)
			require.Equal(t, last, gotLast, "%q", line)
		}
	}
	_, ok := parseEnd("")
	require.False(t, ok)
}

func TestMonotonicMatchesTheClock(t *testing.T) {
	in := time.Now().Add(time.Second)
	got := monotonic(in)
	want := monoNow() + int64(time.Until(in))
	require.InDelta(t, want, got, float64(5*time.Millisecond))
	require.LessOrEqual(t, got, want+int64(time.Millisecond))
}

// guardOf reads the pid of the guard a command ran under, its parent,
// which the command wrote to $DIR/guard.
func guardOf(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "guard"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// A guard runs attempt after attempt: starting one costs more than the
// rest of a pickup. Each attempt still gets its own input, error and
// environment, and finds nothing left of the one before.
func TestGuardRunsAttemptAfterAttempt(t *testing.T) {
	t.Parallel()
	p := newTestPool(t, io.Discard)
	var guard int
	for i := range 3 {
		dir := t.TempDir()
		var stderr lockedBuffer
		// Each attempt leaves a background child: it must be dead before
		// the next attempt starts, and not counted as the next one's.
		end, err := p.Run(context.Background(), Attempt{
			Command: `echo $PPID > $DIR/guard; sleep 60 & echo $! > $DIR/child; printf '%s %s ' "$N" "$FILA_TEST_REPLACED" >&2; cat >&2`,
			Env:     []string{"DIR=" + dir, "N=" + strconv.Itoa(i), "FILA_TEST_REPLACED=by-the-attempt"},
			Stdin:   []byte(fmt.Sprintf("input-%d", i)),
			Stderr:  &stderr, OwnedUntil: func() time.Time { return time.Now().Add(time.Minute) }})
		require.NoError(t, err)
		require.Equal(t, End{How: Exited}, end)
		require.Equal(t, fmt.Sprintf("%d by-the-attempt input-%d", i, i), stderr.String())
		b, err := os.ReadFile(filepath.Join(dir, "child"))
		require.NoError(t, err)
		child, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.Empty(t, alive([]int{child}), "the attempt's background child is dead when it ends")
		if i == 0 {
			guard = guardOf(t, dir)
		} else {
			require.Equal(t, guard, guardOf(t, dir), "attempt %d ran under the first attempt's guard", i)
		}
	}
}

// Attempts that run at once each have a guard of their own, and their
// inputs and errors do not cross.
func TestAttemptsAtOnceHaveAGuardEach(t *testing.T) {
	t.Parallel()
	p := newTestPool(t, io.Discard)
	const n = 6
	var wg sync.WaitGroup
	dirs := make([]string, n)
	for i := range n {
		dirs[i] = t.TempDir()
		wg.Go(func() {
			var stderr lockedBuffer
			// Each waits until all have started, so all run at once.
			end, err := p.Run(context.Background(), Attempt{
				Command: `echo $PPID > $DIR/guard; touch $DIR/started; while [ "$(ls $ALL/*/started 2>/dev/null | wc -l)" -lt ` + strconv.Itoa(n) + ` ]; do sleep 0.01; done; cat >&2`,
				Env:     []string{"DIR=" + dirs[i], "ALL=" + filepath.Dir(dirs[i])},
				Stdin:   []byte(strings.Repeat(strconv.Itoa(i), 10000)), // more than a pipe takes at once
				Stderr:  &stderr, OwnedUntil: func() time.Time { return time.Now().Add(time.Minute) }})
			assert := require.New(t)
			assert.NoError(err)
			assert.Equal(End{How: Exited}, end)
			assert.Equal(strings.Repeat(strconv.Itoa(i), 10000), stderr.String())
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, dir := range dirs {
		seen[guardOf(t, dir)] = true
	}
	require.Len(t, seen, n, "each attempt running at once had a guard of its own")
}

// Between jobs, a guard takes a deadline or a cancel for the attempt that
// just ended (one that crossed its report), not for the next one.
func TestLateMessagesDoNotReachTheNextAttempt(t *testing.T) {
	t.Parallel()
	p := newTestPool(t, io.Discard)
	g, err := p.take()
	require.NoError(t, err)
	require.NoError(t, g.send(msgCancel))
	require.NoError(t, g.send(msgDeadline+" 1"))
	p.put(g)
	dir := t.TempDir()
	end, err := p.Run(context.Background(), Attempt{Command: `echo $PPID > $DIR/guard; sleep 0.2`, Env: []string{"DIR=" + dir},
		OwnedUntil: func() time.Time { return time.Now().Add(time.Minute) }})
	require.NoError(t, err)
	require.Equal(t, End{How: Exited}, end)
	require.Equal(t, g.cmd.Process.Pid, guardOf(t, dir), "the guard that got the late messages ran the job")
}

// Guards beyond the spare ones that wait longer than the idle limit are
// let go: a burst of attempts at once leaves no processes behind.
func TestIdleGuardsBeyondTheSpareOnesGo(t *testing.T) {
	t.Parallel()
	p := newTestPool(t, io.Discard)
	p.idleLimit = 0
	var taken []*guardProc
	for range 3 {
		g, err := p.take()
		require.NoError(t, err)
		taken = append(taken, g)
	}
	for _, g := range taken {
		p.put(g)
	}
	p.mu.Lock()
	n := len(p.idle)
	p.mu.Unlock()
	require.LessOrEqual(t, n, p.spare, "only the spare guards wait")
	for _, g := range taken[:len(taken)-p.spare] {
		require.NotNil(t, g.cmd.ProcessState, "guard %d was let go", g.cmd.Process.Pid)
	}
}

// A guard killed while its command runs takes the command with it, and
// the worker kills what the command started, which a worker that adopts
// orphans (fila work) gets, before the attempt's Run returns; without
// that, those processes live on.
func TestKilledGuardLeavesNothingToAWorkerThatAdopts(t *testing.T) {
	t.Parallel()
	for _, adopt := range []bool{true, false} {
		t.Run(fmt.Sprintf("adopt=%v", adopt), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			w := exec.Command(os.Args[0])
			w.Env = append(os.Environ(), workerEnv+"="+`echo $PPID > $DIR/guard; `+treeCommand("sleep 60"), "DIR="+dir)
			if adopt {
				w.Env = append(w.Env, "ADOPT=1")
			}
			var out lockedBuffer
			w.Stdout, w.Stderr = &out, &out
			require.NoError(t, w.Start())
			t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
			r := &run{dir: dir}
			pids := r.waitPids(t, 5)
			t.Cleanup(func() {
				for _, pid := range alive(pids) {
					killBelow(pid, 0, true) // the trap's sleep, recorded by no one
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			require.NoError(t, syscall.Kill(guardOf(t, dir), syscall.SIGKILL))
			// The worker says how the attempt ended once Run returned. (It
			// may not have exited yet: the processes left, if alive, hold
			// its output open.)
			waitFor(t, 30*time.Second, "the worker's Run returned", func() bool {
				return strings.Contains(out.String(), "the command ended:")
			})
			require.Contains(t, out.String(), "exec guard:")
			if adopt {
				require.Empty(t, alive(pids), "every process of the attempt is dead when its Run returns")
				return
			}
			// The command itself died with its guard; its children are
			// init's now.
			require.Empty(t, alive(pids[:1]))
			require.NotEmpty(t, alive(pids[1:]), "without adoption the command's children outlive the guard")
		})
	}
}
