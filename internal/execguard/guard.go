package execguard

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main is the guard process: it waits for its job on the control socket,
// then runs the job's command with sh -c, its standard input, output and
// error passed through, until the command exits or the guard kills its
// tree (see the package comment). It returns the guard's exit status.
func Main() int {
	// Before anything can fork: the command must not hold the control
	// socket, or the worker's death would not reach the guard as end of
	// file while the command lives.
	syscall.CloseOnExec(ControlFD)
	var st unix.Stat_t
	if err := unix.Fstat(ControlFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		fmt.Fprintln(os.Stderr, "fila exec-guard: this runs only under fila work --exec (no control socket on fd 3)")
		return 2
	}
	// Writing to a closed socket or pipe once the worker died must not
	// kill the guard (with a handler installed, such a write fails with
	// EPIPE; an ignored signal would be inherited by the command).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	g := &guard{ctl: os.NewFile(ControlFD, "exec-guard control"), self: os.Getpid()}
	return g.run()
}

// guard is the state of Main.
type guard struct {
	ctl  *os.File
	self int
	sh   int // the pid of sh -c COMMAND
	chld chan os.Signal

	shDone   bool // sh was reaped; shStatus is how it ended
	shStatus syscall.WaitStatus
}

// msg is one line from the worker, or the end of them.
type msg struct {
	job      *job
	deadline int64 // CLOCK_MONOTONIC nanoseconds
	cancel   bool
	err      error // io.EOF once the worker's end closed; the last msg
}

func (g *guard) run() int {
	// All that does not depend on the job is done while it is awaited.
	g.chld = make(chan os.Signal, 1)
	signal.Notify(g.chld, syscall.SIGCHLD)
	var setupErr error
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		setupErr = fmt.Errorf("become a child subreaper: %w", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil && setupErr == nil {
		setupErr = err
	}
	// sh dies with the guard should the guard itself be killed. The death
	// signal follows the thread that forks, so that thread is this one,
	// for good: the main goroutine runs until the process exits.
	goruntime.LockOSThread()

	// Waiting, on this thread, so that the job is read where it is run.
	// A signal that ends a waiting guard has nothing to kill.
	in := bufio.NewReader(g.ctl)
	first := readMsg(in)
	j := first.job
	switch {
	case errors.Is(first.err, io.EOF):
		return ExitKilled // the worker is gone, or let this waiting guard go
	case j == nil:
		return g.fail("control: %v", cmp.Or(first.err, errors.New("no job first")))
	case setupErr != nil:
		return g.fail("%v", setupErr)
	case j.Deadline <= monoNow():
		return g.exit(End{How: Deadline})
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	g.sh, err = syscall.ForkExec(sh, []string{"sh", "-c", j.Command}, &syscall.ProcAttr{
		Env:   j.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return g.fail("start %s: %v", sh, err)
	}
	msgs := make(chan msg, 1)
	go func() {
		for {
			m := readMsg(in)
			msgs <- m
			if m.err != nil {
				return
			}
		}
	}()

	deadline := j.Deadline
	timer := time.NewTimer(time.Duration(deadline - monoNow()))
	for {
		select {
		case <-g.chld:
			g.reap()
			if g.shDone {
				// The command's exit ends the attempt, whatever its children
				// hold open.
				g.killTree()
				return g.exit(commandEnd(g.shStatus))
			}
		case m := <-msgs:
			switch {
			case m.cancel:
				g.killTree()
				return g.exit(End{How: Cancelled})
			case m.deadline != 0:
				deadline = m.deadline
				timer.Reset(time.Duration(deadline - monoNow()))
			case errors.Is(m.err, io.EOF):
				g.killTree()
				return ExitKilled // the worker is gone: nobody to report to
			default:
				g.killTree()
				return g.exit(End{How: Failed, Detail: "control: " + cmp.Or(m.err, errors.New("a second job")).Error()})
			}
		case <-timer.C:
			if left := deadline - monoNow(); left > 0 {
				timer.Reset(time.Duration(left))
				continue
			}
			g.killTree()
			return g.exit(End{How: Deadline})
		case s := <-term:
			g.killTree()
			return g.exit(End{How: Terminated, Code: int(s.(syscall.Signal))})
		}
	}
}

// readMsg reads the worker's next line.
func readMsg(in *bufio.Reader) msg {
	line, err := in.ReadString('\n')
	if err != nil {
		if line != "" && errors.Is(err, io.EOF) {
			err = fmt.Errorf("line %q cut short", line)
		}
		return msg{err: err}
	}
	word, arg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch word {
	case msgJob:
		j := &job{}
		if err := json.Unmarshal([]byte(arg), j); err != nil {
			return msg{err: fmt.Errorf("job: %w", err)}
		}
		return msg{job: j}
	case msgCancel:
		return msg{cancel: true}
	case msgDeadline:
		if ns, err := strconv.ParseInt(arg, 10, 64); err == nil && ns > 0 {
			return msg{deadline: ns}
		}
	}
	return msg{err: fmt.Errorf("unexpected line %q", line)}
}

// exit reports e to the worker and returns the guard's status.
func (g *guard) exit(e End) int {
	_, _ = io.WriteString(g.ctl, e.encode()+"\n")
	return e.status()
}

// fail reports that the guard could not run the command, also on its
// stderr, which becomes the job's error.
func (g *guard) fail(format string, args ...any) int {
	detail := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "fila exec-guard: "+detail)
	return g.exit(End{How: Failed, Detail: detail})
}

// commandEnd is how sh ended.
func commandEnd(ws syscall.WaitStatus) End {
	if ws.Signaled() {
		return End{How: Signalled, Code: int(ws.Signal())}
	}
	return End{How: Exited, Code: ws.ExitStatus()}
}

// reap collects every child that has exited, noting sh's status, and
// reports whether the guard still has children.
func (g *guard) reap() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: none left
			return false
		case pid == 0:
			return true
		case pid == g.sh:
			g.shDone, g.shStatus = true, ws
		}
	}
}

// giveUp bounds how long killTree tries: a process that SIGKILL cannot
// reach (one that changed its user) must not keep the guard forever.
const giveUp = 5 * time.Second

// killTree kills every descendant and reaps them all. Orphans are
// reparented to the guard, a child subreaper, so its descendants are all
// it has to find: through /proc, again and again, because they may fork
// while they are killed, until it has no child left.
func (g *guard) killTree() {
	if !g.reap() {
		return
	}
	start := time.Now()
	for {
		if !g.shDone {
			// The command's group at once; sh, not yet reaped, holds its id.
			_ = syscall.Kill(-g.sh, syscall.SIGKILL)
		}
		procs := descendants(g.self)
		for _, p := range procs {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		for _, p := range procs {
			// Groups led by a descendant, or sh's, while one of its members
			// is alive to hold the id; never another group of the session,
			// which a descendant may have joined: the worker's, or the
			// guard's own.
			if p.pgid == p.pid || p.pgid == g.sh {
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			}
		}
		if !g.reap() {
			return
		}
		if time.Since(start) > giveUp {
			fmt.Fprintf(os.Stderr, "fila exec-guard: gave up killing %d processes after %s: %v\n", len(procs), giveUp, procs)
			return
		}
		select {
		case <-g.chld:
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// proc is one process found in /proc.
type proc struct{ pid, pgid int }

func (p proc) String() string { return strconv.Itoa(p.pid) }

// descendants lists the processes below root: through the children files
// of /proc/PID/task/TID, which cost in proportion to the tree, or where
// the kernel has none (CONFIG_PROC_CHILDREN), through every process's
// parent link. Neither is an atomic snapshot; killTree makes up for that
// by looking again until nothing is left.
func descendants(root int) []proc {
	if haveChildrenFiles() {
		return descendantsByChildren(root)
	}
	return descendantsByParent(root)
}

var haveChildrenFiles = sync.OnceValue(func() bool {
	pid := strconv.Itoa(os.Getpid())
	_, err := os.Stat("/proc/" + pid + "/task/" + pid + "/children")
	return err == nil
})

func descendantsByChildren(root int) []proc {
	var out []proc
	seen := map[int]bool{root: true}
	next := childrenOf(root)
	for len(next) > 0 {
		pid := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		_, pgid, ok := parentAndGroup(pid)
		if !ok {
			continue // gone meanwhile
		}
		out = append(out, proc{pid: pid, pgid: pgid})
		next = append(next, childrenOf(pid)...)
	}
	return out
}

// childrenOf lists the children of each of pid's threads: an orphan is
// reparented to any thread of its subreaper.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	tids, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, tid := range tids {
		b, _ := os.ReadFile(dir + tid + "/children")
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

func descendantsByParent(root int) []proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]proc{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		ppid, pgid, ok := parentAndGroup(pid)
		if ok {
			children[ppid] = append(children[ppid], proc{pid: pid, pgid: pgid})
		}
	}
	// A pid reused meanwhile could make a loop: each is visited once.
	var out []proc
	seen := map[int]bool{root: true}
	next := append([]proc(nil), children[root]...)
	for len(next) > 0 {
		p := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[p.pid] {
			continue
		}
		seen[p.pid] = true
		out = append(out, p)
		next = append(next, children[p.pid]...)
	}
	return out
}

// parentAndGroup reads a process's parent and process group from
// /proc/PID/stat: "pid (comm) state ppid pgrp …", where comm may hold
// spaces and parentheses, so the fields are counted from its last ')'.
func parentAndGroup(pid int) (ppid, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false // gone meanwhile
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(fields[1])
	pgid, err2 := strconv.Atoi(fields[2])
	return ppid, pgid, err1 == nil && err2 == nil
}
