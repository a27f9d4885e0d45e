package execguard

import (
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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Main is the guard process: it runs the jobs the worker sends on the
// control socket, one at a time, each with sh -c, until the worker's end
// of the socket closes (see the package comment). It returns the guard's
// exit status.
func Main() int {
	// Before anything can fork: the command must not hold the control
	// socket, or the worker's death would not reach the guard as end of
	// file while the command lives.
	syscall.CloseOnExec(ControlFD)
	if t, err := unix.GetsockoptInt(ControlFD, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_SEQPACKET {
		fmt.Fprintln(os.Stderr, "fila exec-guard: this runs only under fila work --exec (no control socket on fd 3)")
		return 2
	}
	// Writing to a closed socket or pipe once the worker died must not
	// kill the guard (with a handler installed, such a write fails with
	// EPIPE; an ignored signal would be inherited by the command).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// One thread does the guard's work (see run); more would only spin.
	goruntime.GOMAXPROCS(1)
	g := &guard{self: os.Getpid(), env: os.Environ(), pidfd: -1}
	return g.run()
}

// guard is the state of Main.
type guard struct {
	self  int
	env   []string     // the guard's own environment, which is the worker's
	sh    string       // the path of sh
	termR int          // readable once the guard is told to stop (see watchTerm)
	term  atomic.Int32 // the signal that told it, once termR is readable
	buf   []byte       // of the worker's messages
	oob   []byte

	// Of the attempt running now.
	pid      int // of sh -c COMMAND
	pidfd    int // sh's pidfd, readable once it exited; -1 without one
	shDone   bool
	shStatus syscall.WaitStatus
}

// msg is one message from the worker, or the end of them.
type msg struct {
	job      *job
	fds      []int // what came with a job: its stdin and stderr
	deadline int64 // CLOCK_MONOTONIC nanoseconds
	cancel   bool
	err      error // io.EOF once the worker's end closed; the last msg
}

// The guard waits for everything in one place, the locked main thread
// blocked in ppoll on the control socket, sh's pidfd and the stop pipe,
// until the attempt's deadline: each event wakes the thread that acts on
// it. Waiting through goroutines and channels (a reader, SIGCHLD's
// handler) cost two thread hand-offs per event, since only this thread
// may fork.
func (g *guard) run() int {
	var setupErr error
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		setupErr = fmt.Errorf("become a child subreaper: %w", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil && setupErr == nil {
		setupErr = err
	}
	g.sh = sh
	if g.termR, err = watchTerm(&g.term); err != nil && setupErr == nil {
		setupErr = err
	}
	g.buf, g.oob = make([]byte, maxMessage), make([]byte, unix.CmsgSpace(2*4))
	// Each command dies with the guard should the guard itself be killed.
	// The death signal follows the thread that forks, so that thread is
	// this one, for good: the main goroutine runs until the process exits.
	goruntime.LockOSThread()

	for {
		ev := g.wait(-1, 0)
		if ev.term {
			return ExitKilled // nothing runs: nothing to kill
		}
		m := ev.msg
		switch {
		case errors.Is(m.err, io.EOF):
			return 0 // the worker is gone, or let this waiting guard go
		case m.err != nil:
			return g.report(End{How: Failed, Detail: "control: " + m.err.Error()}, true)
		case m.job == nil:
			// A renewal or a cancel sent for the attempt that just ended,
			// crossing its report: that attempt is over.
			continue
		case setupErr != nil:
			closeAll(m.fds)
			return g.fail(setupErr.Error())
		}
		end, last := g.attempt(m)
		if end == nil {
			return ExitKilled // the worker is gone: nobody to report to
		}
		if status := g.report(*end, last); last {
			return status
		}
	}
}

// watchTerm returns a pipe's read end that becomes readable once the
// guard gets SIGTERM, SIGINT or SIGHUP, the signal stored in sig first
// (atomically: the pipe is no synchronization the memory model knows of).
// Only the signal's arrival crosses threads.
func watchTerm(sig *atomic.Int32) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, fmt.Errorf("stop pipe: %w", err)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		s := <-term
		sig.Store(int32(s.(syscall.Signal)))
		_, _ = unix.Write(p[1], []byte{1})
	}()
	return p[0], nil
}

// event is what ended a wait: a message, sh's exit, the deadline, a stop.
type event struct {
	msg      msg
	haveMsg  bool
	exited   bool // sh's pidfd is readable
	deadline bool
	term     bool
}

// wait blocks until the worker sends a message, sh (pidfd, or -1 for
// none) exits, the guard is told to stop, or CLOCK_MONOTONIC reaches
// deadline (0 for none). A stop comes first, then a message, then sh's
// exit: each wait returns one event.
func (g *guard) wait(pidfd int, deadline int64) event {
	fds := []unix.PollFd{
		{Fd: int32(g.termR), Events: unix.POLLIN},
		{Fd: ControlFD, Events: unix.POLLIN},
		{Fd: int32(pidfd), Events: unix.POLLIN}, // a negative fd is skipped
	}
	if g.termR < 0 {
		fds[0].Fd = -1
	}
	for {
		var timeout *unix.Timespec
		if deadline != 0 {
			left := deadline - monoNow()
			if left <= 0 {
				return event{deadline: true}
			}
			if pidfd < 0 && g.pid > 0 && !g.shDone {
				// No pidfd: sh's exit is found by looking.
				left = min(left, int64(pidPoll))
			}
			ts := unix.NsecToTimespec(left)
			timeout = &ts
		}
		n, err := unix.Ppoll(fds, timeout, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return event{haveMsg: true, msg: msg{err: fmt.Errorf("poll: %w", err)}}
		case fds[0].Revents != 0:
			return event{term: true}
		case fds[1].Revents != 0:
			return event{haveMsg: true, msg: g.readMsg()}
		case fds[2].Revents != 0:
			return event{exited: true}
		case n == 0 && pidfd < 0 && g.pid > 0 && !g.shDone:
			if g.reap(); g.shDone {
				return event{exited: true}
			}
		}
	}
}

// pidPoll is how often a guard without pidfds (a kernel before 5.3)
// looks whether sh exited.
const pidPoll = 2 * time.Millisecond

// readMsg reads one message; a job's comes with its two descriptors.
func (g *guard) readMsg() msg {
	buf, oob := g.buf, g.oob
	n, oobn, flags, _, err := unix.Recvmsg(ControlFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
	for errors.Is(err, syscall.EINTR) {
		n, oobn, flags, _, err = unix.Recvmsg(ControlFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil {
		return msg{err: err}
	}
	var fds []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return msg{err: fmt.Errorf("descriptors: %w", err)}
		}
		for _, s := range scms {
			got, err := unix.ParseUnixRights(&s)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	m := parseMsg(string(buf[:n]))
	switch {
	case n == 0 && oobn == 0:
		m = msg{err: io.EOF}
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		m = msg{err: fmt.Errorf("a message longer than %d bytes", len(buf))}
	case m.job != nil && len(fds) != 2:
		m = msg{err: fmt.Errorf("a job with %d descriptors, not 2", len(fds))}
	}
	if m.job != nil {
		m.fds = fds
	} else {
		closeAll(fds)
	}
	return m
}

// parseMsg reads a message's text.
func parseMsg(s string) msg {
	word, arg, _ := strings.Cut(s, " ")
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
	return msg{err: fmt.Errorf("unexpected message %q", s)}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// attempt runs one job's command until it ends, and kills what it left.
// It returns how the command ended and whether the guard must exit after
// reporting it; a nil End when the worker is gone.
func (g *guard) attempt(m msg) (end *End, last bool) {
	j := m.job
	stdin, stderr := m.fds[0], m.fds[1]
	if j.Deadline <= monoNow() {
		closeAll(m.fds)
		return &End{How: Deadline}, false
	}
	g.pid, g.pidfd, g.shDone = 0, -1, false
	pid, err := syscall.ForkExec(g.sh, []string{"sh", "-c", j.Command}, &syscall.ProcAttr{
		Env:   withEnv(g.env, j.Env),
		Files: []uintptr{uintptr(stdin), 1, uintptr(stderr)},
		// A pidfd is close-on-exec: no command inherits it.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &g.pidfd},
	})
	closeAll(m.fds) // the command holds them now
	if err != nil {
		return &End{How: Failed, Detail: fmt.Sprintf("start %s: %v", g.sh, err)}, false
	}
	g.pid = pid
	defer func() {
		if g.pidfd >= 0 {
			unix.Close(g.pidfd)
			g.pidfd = -1
		}
	}()

	done := func(e End) (*End, bool) {
		return &e, !g.killTree()
	}
	deadline := j.Deadline
	for {
		ev := g.wait(g.pidfd, deadline)
		switch {
		case ev.term:
			g.killTree()
			return &End{How: Terminated, Code: int(g.term.Load())}, true
		case ev.exited:
			if g.reap(); g.shDone {
				// The command's exit ends the attempt, whatever its children
				// hold open.
				return done(commandEnd(g.shStatus))
			}
		case ev.deadline:
			return done(End{How: Deadline})
		case ev.haveMsg:
			m := ev.msg
			switch {
			case m.cancel:
				return done(End{How: Cancelled})
			case m.deadline != 0:
				deadline = m.deadline
			case errors.Is(m.err, io.EOF):
				g.killTree()
				return nil, true
			default:
				closeAll(m.fds)
				e, _ := done(End{How: Failed, Detail: "control: " + cmp.Or(m.err, errors.New("a second job")).Error()})
				return e, true
			}
		}
	}
}

// withEnv is base with extra's variables added, replacing any of the same
// name, as a shell's export would.
func withEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	names := make(map[string]bool, len(extra))
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		names[name] = true
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !names[name] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// report tells the worker how the attempt ended, and returns the guard's
// exit status should it exit now. last says it will: the worker does not
// hand it another job.
func (g *guard) report(e End, last bool) int {
	line := e.encode()
	if last {
		line = lastWord + " " + line
	}
	_, _ = unix.Write(ControlFD, []byte(line))
	return e.status()
}

// fail reports that the guard cannot run commands, also on its stderr
// (the worker's), and returns its exit status.
func (g *guard) fail(detail string) int {
	fmt.Fprintln(os.Stderr, "fila exec-guard: "+detail)
	return g.report(End{How: Failed, Detail: detail}, true)
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
		case pid == g.pid:
			g.shDone, g.shStatus = true, ws
		}
	}
}

// giveUp bounds how long a kill tries: a process that SIGKILL cannot
// reach (one that changed its user) must not keep the guard forever.
const giveUp = 5 * time.Second

// killTree kills every descendant and reaps them all, and reports whether
// it could: a guard with a process left over runs no further job. Orphans
// are reparented to the guard, a child subreaper, so its descendants are
// all it has to find: through /proc, again and again, because they may
// fork while they are killed, until it has no child left.
func (g *guard) killTree() bool {
	if !g.reap() {
		return true // the common case: the command left nothing behind
	}
	start := time.Now()
	for {
		if !g.shDone {
			// The command's group at once; sh, not yet reaped, holds its id.
			_ = syscall.Kill(-g.pid, syscall.SIGKILL)
		}
		procs := killBelow(g.self, g.pid, g.shDone)
		if !g.reap() {
			return true
		}
		if time.Since(start) > giveUp {
			fmt.Fprintf(os.Stderr, "fila exec-guard: gave up killing %d processes after %s: %v\n", len(procs), giveUp, procs)
			return false
		}
		// The kills reach them at once; this only lets them die.
		time.Sleep(time.Millisecond)
	}
}

// killBelow sends SIGKILL to every process below root, and to the process
// groups they lead or that sh (pid sh, while not reaped) leads, and
// returns the processes it found.
func killBelow(root, sh int, shReaped bool) []proc {
	procs := descendants(root)
	for _, p := range procs {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	for _, p := range procs {
		// Groups led by a descendant, or sh's, while one of its members
		// is alive to hold the id; never another group of the session,
		// which a descendant may have joined: the worker's, or the
		// guard's own.
		if p.pgid == p.pid || (!shReaped && p.pgid == sh) {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
	}
	return procs
}

// proc is one process found in /proc.
type proc struct{ pid, pgid int }

func (p proc) String() string { return strconv.Itoa(p.pid) }

// descendants lists the processes below root: through the children files
// of /proc/PID/task/TID, which cost in proportion to the tree, or where
// the kernel has none (CONFIG_PROC_CHILDREN), through every process's
// parent link. Neither is an atomic snapshot; the kills make up for that
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
	if !haveChildrenFiles() {
		var out []int
		for _, p := range childrenByParent()[pid] {
			out = append(out, p.pid)
		}
		return out
	}
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

// childrenByParent maps each process of /proc to its children.
func childrenByParent() map[int][]proc {
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
	return children
}

func descendantsByParent(root int) []proc {
	children := childrenByParent()
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
