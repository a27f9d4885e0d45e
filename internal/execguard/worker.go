package execguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Attempt is what a guard runs for one attempt of a job.
type Attempt struct {
	Command string // run with sh -c, sh found on the guard's own PATH
	// Env is added to the worker's environment (the guard's) for the
	// command, replacing variables of the same name.
	Env    []string
	Stdin  []byte
	Stderr io.Writer // the guard's stdout is the pool's
	// OwnedUntil is when the attempt ends for this worker; it is sent to
	// the guard again each time Renewed receives.
	OwnedUntil func() time.Time
	Renewed    <-chan struct{}
}

// Pool keeps the guards of one worker: one per attempt running at once,
// each reused for attempt after attempt, and a few started ahead so that
// starting one (the fila binary: tens of milliseconds) stays off the
// pickup path.
type Pool struct {
	newCmd    func() *exec.Cmd
	spare     int
	idleLimit time.Duration

	mu       sync.Mutex
	idle     []*guardProc // the most recently used last
	starting int
	closed   bool
	starts   sync.WaitGroup // refill's
}

// IdleLimit is how long a guard beyond the spare ones may wait unused
// before it is let go: a burst of concurrency leaves no processes behind.
const IdleLimit = time.Minute

// cancelGrace is how long a guard told to cancel has to report before it
// is killed. It answers as soon as it killed the tree; only a guard that
// cannot run (stopped) waits that long, and killing it kills its command
// too (the command's parent-death signal, and AdoptOrphans for the rest).
const cancelGrace = time.Second

// NewPool returns a pool that keeps spare guards started beyond those
// running jobs. newCmd returns a command that runs Main, with its Path,
// Args, Stdout (also its commands') and Stderr (the guard's own messages)
// set; the pool sets the rest, and starts guards only once Run is first
// called.
func NewPool(newCmd func() *exec.Cmd, spare int) *Pool {
	return &Pool{newCmd: newCmd, spare: spare, idleLimit: IdleLimit}
}

// guardProc is a started guard, waiting for a job or running one.
type guardProc struct {
	cmd       *exec.Cmd
	conn      *net.UnixConn // the worker's end of the control socket
	idleSince time.Time
}

// start starts a guard, to wait for its first job.
func (p *Pool) start() (*guardProc, error) {
	// Close-on-exec both: only the guard, through ExtraFiles, gets its end;
	// no other command this worker starts meanwhile inherits either.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec guard: control socket: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "exec-guard control (guard's end)")
	defer theirs.Close()
	mine := os.NewFile(uintptr(fds[0]), "exec-guard control")
	c, err := net.FileConn(mine) // a copy, in the runtime's poller
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("exec guard: control socket: %w", err)
	}
	g := &guardProc{conn: c.(*net.UnixConn), cmd: p.newCmd()}
	g.cmd.ExtraFiles = []*os.File{theirs}
	// A process group of its own, so that signals meant for the worker's,
	// such as a terminal's Ctrl-Z, do not reach the guard.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only for output a process the guard could not kill holds open.
	g.cmd.WaitDelay = time.Second
	if err := startGuard(g.cmd); err != nil {
		g.conn.Close()
		return nil, fmt.Errorf("exec guard: %w", err)
	}
	return g, nil
}

// take returns a waiting guard, or starts one, and has the pool start
// spares.
func (p *Pool) take() (*guardProc, error) {
	defer p.refill()
	for {
		p.mu.Lock()
		var g *guardProc
		if n := len(p.idle); n > 0 {
			g, p.idle = p.idle[n-1], p.idle[:n-1]
		}
		p.mu.Unlock()
		if g == nil {
			return p.start()
		}
		if g.waiting() {
			return g, nil
		}
		g.release() // died while it waited: take another
	}
}

// put gives back a guard that is ready for its next job, and lets go of
// the spares beyond p.spare that have waited over IdleLimit.
func (p *Pool) put(g *guardProc) {
	now := time.Now()
	g.idleSince = now
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		g.release()
		return
	}
	p.idle = append(p.idle, g)
	var old []*guardProc
	for len(p.idle) > p.spare && now.Sub(p.idle[0].idleSince) > p.idleLimit {
		old = append(old, p.idle[0])
		p.idle = p.idle[1:]
	}
	p.mu.Unlock()
	for _, g := range old {
		g.release()
	}
}

// refill starts guards in the background until spare of them wait.
func (p *Pool) refill() {
	p.mu.Lock()
	n := p.spare - len(p.idle) - p.starting
	if p.closed || n <= 0 {
		p.mu.Unlock()
		return
	}
	p.starting += n
	p.starts.Add(n)
	p.mu.Unlock()
	for range n {
		go func() {
			defer p.starts.Done()
			g, err := p.start()
			p.mu.Lock()
			p.starting--
			keep := err == nil && !p.closed
			if keep {
				g.idleSince = time.Now()
				p.idle = append([]*guardProc{g}, p.idle...) // not yet used: the first to go
			}
			p.mu.Unlock()
			if err == nil && !keep {
				g.release()
			}
		}()
	}
}

// Close lets the waiting guards go and waits for them to exit; Run may
// not be called after it. Guards running a job exit once it ends. Without
// Close, guards exit with the worker (their control socket ends).
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.starts.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, g := range idle {
		g.release()
	}
}

// waiting reports whether g still waits for a job: a guard that exited
// closed its end of the control socket, and a waiting one sends nothing.
func (g *guardProc) waiting() bool {
	rc, err := g.conn.SyscallConn()
	if err != nil {
		return false
	}
	n := -1
	_ = rc.Control(func(fd uintptr) {
		n, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	})
	return err == nil && n == 0
}

// release ends a guard that has no job: end of file on its control socket
// lets it go.
func (g *guardProc) release() {
	g.conn.Close()
	waitGuard(g.cmd)
}

// Run runs a.Command under a guard until it ends, and returns how it
// ended: by itself, or killed by the guard at a.OwnedUntil (which the
// guard keeps to even while this process is frozen), or when ctx is done.
// Its error is for a guard that could not be started, or that died
// without a report (one that was killed).
func (p *Pool) Run(ctx context.Context, a Attempt) (End, error) {
	if err := ctx.Err(); err != nil {
		return End{}, err
	}
	line, err := json.Marshal(job{Deadline: monotonic(a.OwnedUntil()), Command: a.Command, Env: a.Env})
	if err != nil {
		return End{}, fmt.Errorf("exec guard: %w", err)
	}
	if n := len(msgJob) + 1 + len(line); n > maxMessage {
		return End{}, fmt.Errorf("exec guard: the command and the variables it adds take %d bytes, more than the %d a job may", n, maxMessage)
	}
	g, err := p.take()
	if err != nil {
		return End{}, err
	}
	// The command's ends of its stdin and stderr are bare descriptors,
	// only passed on and closed: making each an *os.File in the runtime's
	// poller cost this process more than the rest of the attempt.
	stdin, stdinW, err := pipe()
	if err != nil {
		p.put(g)
		return End{}, fmt.Errorf("exec guard: stdin: %w", err)
	}
	stderrFd, stderr, err := pipe()
	if err != nil {
		closeAll([]int{stdin, stdinW})
		p.put(g)
		return End{}, fmt.Errorf("exec guard: stderr: %w", err)
	}
	stderrR, err := pollable(stderrFd, "exec stderr")
	if err != nil {
		closeAll([]int{stdin, stdinW, stderr})
		p.put(g)
		return End{}, fmt.Errorf("exec guard: stderr: %w", err)
	}
	var wg sync.WaitGroup
	var stdinFile *os.File // only for a payload written while the command runs
	if len(a.Stdin) <= pipeAtomic {
		// Fits the pipe's buffer, which is empty: written at once.
		_ = writeAll(stdinW, a.Stdin)
		unix.Close(stdinW)
	} else if stdinFile, err = pollable(stdinW, "exec stdin"); err != nil {
		closeAll([]int{stdin, stderr})
		stderrR.Close()
		p.put(g)
		return End{}, fmt.Errorf("exec guard: stdin: %w", err)
	} else {
		wg.Go(func() {
			// Ends once the command read it all, or the attempt ended.
			_, _ = stdinFile.Write(a.Stdin)
			stdinFile.Close()
		})
	}
	rights := unix.UnixRights(stdin, stderr)
	_, _, err = g.conn.WriteMsgUnix(append([]byte(msgJob+" "), line...), rights, nil)
	closeAll([]int{stdin, stderr})
	if err != nil {
		if stdinFile != nil {
			stdinFile.SetWriteDeadline(time.Now())
		}
		wg.Wait()
		stderrR.Close()
		g.release()
		return End{}, fmt.Errorf("exec guard: send job: %w", err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		copyStderr(orDiscard(a.Stderr), stderrR)
	}()

	stop := make(chan struct{})
	wg.Go(func() {
		var kill <-chan time.Time
		done := ctx.Done()
		for {
			select {
			case <-a.Renewed:
				_ = g.send(msgDeadline + " " + strconv.FormatInt(monotonic(a.OwnedUntil()), 10))
			case <-done:
				done = nil
				_ = g.send(msgCancel)
				kill = time.After(cancelGrace)
			case <-kill:
				_ = g.cmd.Process.Kill()
			case <-stop:
				return
			}
		}
	})
	var buf [512]byte
	n, rerr := g.conn.Read(buf[:])
	close(stop)
	end, last, ok := parseReport(string(buf[:n]))
	if rerr != nil || !ok {
		// Killed, most likely: its command died with it, and what that
		// left was reparented to this process, to be killed now. One that
		// lives on kills its tree and exits at the end of file.
		g.conn.Close()
		killOrphansOf(g.cmd.Process.Pid)
	}
	// The attempt is over: no more of its input is needed, and its tree is
	// gone, so its stderr ends at once but for a process the guard could
	// not kill.
	if stdinFile != nil {
		_ = stdinFile.SetWriteDeadline(time.Now())
	}
	_ = stderrR.SetReadDeadline(time.Now().Add(time.Second))
	wg.Wait()
	<-copied
	stderrR.Close()
	if rerr != nil || !ok {
		g.release()
		if rerr == nil {
			rerr = fmt.Errorf("an unexpected report %q", buf[:n])
		}
		return End{}, fmt.Errorf("exec guard: %w (%s)", rerr, g.cmd.ProcessState)
	}
	if last {
		g.release()
	} else {
		p.put(g)
	}
	return end, nil
}

// pipeAtomic is the most a pipe takes at once whatever its size (PIPE_BUF).
const pipeAtomic = 4096

// pipe returns a pipe's read and write ends, blocking and close-on-exec:
// only a guard, through the control socket, gets them.
func pipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	return p[0], p[1], nil
}

// pollable makes fd, one end of a pipe this process keeps, an *os.File
// in the runtime's poller, so that reads and writes can have deadlines.
// Only this end becomes non-blocking: the command's end is its own.
func pollable(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// writeAll writes b to a blocking descriptor.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return err
		}
		b = b[n:]
	}
	return nil
}

// stderrBufs are copyStderr's buffers. io.Copy from an *os.File made a
// 32 KiB buffer per attempt, most of this process's garbage.
var stderrBufs = sync.Pool{New: func() any { return new([4096]byte) }}

// copyStderr copies a command's stderr to w until it ends.
func copyStderr(w io.Writer, r *os.File) {
	buf := stderrBufs.Get().(*[4096]byte)
	defer stderrBufs.Put(buf)
	for {
		n, err := r.Read(buf[:])
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// send writes one message to the guard.
func (g *guardProc) send(m string) error {
	_, err := g.conn.Write([]byte(m))
	return err
}

// guards are this process's guards, by pid, and whether it kills the
// orphans they leave (AdoptOrphans). Every other child of a process that
// adopts orphans is what a guard that died left.
var guards struct {
	sync.Mutex
	pids  map[int]bool
	adopt bool
}

// startGuard starts a guard and records it, so that killOrphans never
// mistakes it for an orphan.
func startGuard(cmd *exec.Cmd) error {
	guards.Lock()
	defer guards.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if guards.pids == nil {
		guards.pids = map[int]bool{}
	}
	guards.pids[cmd.Process.Pid] = true
	return nil
}

// waitGuard waits for a guard that was told to go, or died.
func waitGuard(cmd *exec.Cmd) {
	_ = cmd.Wait()
	guards.Lock()
	delete(guards.pids, cmd.Process.Pid)
	guards.Unlock()
}

// AdoptOrphans makes this process a child subreaper, so that what the
// command of a guard killed by SIGKILL leaves behind (its own command dies
// with it) is reparented here rather than to init, and kills all of it: at
// once when a guard dies, and before Run returns for the attempt that
// guard ran. Only for a process whose every child is a guard of this
// package, such as `fila work`: any other child it has would be taken for
// an orphan and killed.
func AdoptOrphans() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	guards.Lock()
	already := guards.adopt
	guards.adopt = true
	guards.Unlock()
	if !already {
		chld := make(chan os.Signal, 1)
		signal.Notify(chld, syscall.SIGCHLD) // a guard died
		go func() {
			for range chld {
				killOrphans()
			}
		}()
	}
	return nil
}

// killOrphansOf kills what the guard pid left, once it has exited: its
// exit reparents its children first, and sends them their parent-death
// signal.
func killOrphansOf(pid int) {
	guards.Lock()
	adopt := guards.adopt
	guards.Unlock()
	if !adopt {
		return
	}
	// Waits for the guard's exit without collecting it: its *exec.Cmd does.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	killOrphans()
}

// killOrphans kills every child of this process that is not a guard, with
// all below it, and collects them, until none is left.
func killOrphans() {
	guards.Lock()
	defer guards.Unlock()
	if !guards.adopt {
		return
	}
	self := os.Getpid()
	start := time.Now()
	for {
		var strays []int
		for _, pid := range childrenOf(self) {
			if !guards.pids[pid] {
				strays = append(strays, pid)
			}
		}
		if len(strays) == 0 {
			return
		}
		for _, pid := range strays {
			killBelow(pid, 0, true)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if _, pgid, ok := parentAndGroup(pid); ok && pgid == pid {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if time.Since(start) > giveUp {
			fmt.Fprintf(os.Stderr, "fila: gave up killing %d processes an exec guard left after %s: %v\n", len(strays), giveUp, strays)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
