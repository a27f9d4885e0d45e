package execguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Attempt is what a guard runs for one attempt of a job.
type Attempt struct {
	Command string   // run with sh -c, sh found on the guard's own PATH
	Env     []string // the command's whole environment
	Stdin   []byte
	Stderr  io.Writer // the guard's stdout is the pool's
	// OwnedUntil is when the attempt ends for this worker; it is sent to
	// the guard again each time Renewed receives.
	OwnedUntil func() time.Time
	Renewed    <-chan struct{}
}

// Pool keeps guards started ahead of their jobs: starting one (the fila
// binary, some milliseconds) is kept off the pickup path, which hands a
// waiting guard its job and starts another in the background.
type Pool struct {
	newCmd func() *exec.Cmd
	size   int

	mu       sync.Mutex
	idle     []*guardProc
	starting int
	closed   bool
	starts   sync.WaitGroup // refill's
}

// killDelay is how long a guard that was told to cancel has to exit before
// it is killed. It exits as soon as it killed the tree; only a guard that
// cannot run (stopped itself) waits that long.
const killDelay = 5 * time.Second

// NewPool returns a pool that keeps up to size guards waiting. newCmd
// returns a command that runs Main, with its Path, Args, Env (the guard's
// own) and Stdout (also its commands') set; the pool sets the rest, and
// starts guards only once Run is first called.
func NewPool(newCmd func() *exec.Cmd, size int) *Pool {
	return &Pool{newCmd: newCmd, size: size}
}

// guardProc is a started guard, waiting for its job or running it.
type guardProc struct {
	cmd    *exec.Cmd
	ctl    *os.File // the worker's end of the control socket
	stdin  *os.File // the write end of the guard's stdin
	stderr *switchWriter
}

// switchWriter writes to the writer set last, or nowhere before one is:
// a guard's stderr is the attempt's, set when it gets its job.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// start starts a guard, to wait for its job.
func (p *Pool) start() (*guardProc, error) {
	// Close-on-exec all: only the guard, through ExtraFiles and Stdin, gets
	// its ends; no other command this worker starts meanwhile inherits any.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("exec guard: control socket: %w", err)
	}
	// The worker's end non-blocking, so that reads can have a deadline.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("exec guard: control socket: %w", err)
	}
	g := &guardProc{ctl: os.NewFile(uintptr(fds[0]), "exec-guard control"), stderr: &switchWriter{}}
	theirs := os.NewFile(uintptr(fds[1]), "exec-guard control (guard's end)")
	defer theirs.Close()
	stdin, w, err := os.Pipe()
	if err != nil {
		g.ctl.Close()
		return nil, fmt.Errorf("exec guard: stdin: %w", err)
	}
	defer stdin.Close()
	g.stdin = w
	g.cmd = p.newCmd()
	g.cmd.Stdin = stdin
	g.cmd.Stderr = g.stderr
	g.cmd.ExtraFiles = []*os.File{theirs}
	// A process group of its own, so that signals meant for the worker's,
	// such as a terminal's Ctrl-Z, do not reach the guard.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Only for output a process the guard could not kill holds open.
	g.cmd.WaitDelay = killDelay
	if err := g.cmd.Start(); err != nil {
		g.ctl.Close()
		g.stdin.Close()
		return nil, fmt.Errorf("exec guard: %w", err)
	}
	return g, nil
}

// take returns a waiting guard, or starts one, and has the pool start
// another.
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

// refill starts guards in the background until size of them wait.
func (p *Pool) refill() {
	p.mu.Lock()
	n := p.size - len(p.idle) - p.starting
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
				p.idle = append(p.idle, g)
			}
			p.mu.Unlock()
			if err == nil && !keep {
				g.release()
			}
		}()
	}
}

// Close lets the waiting guards go and waits for them to exit; Run may
// not be called after it. Guards running a job are not affected. Without
// Close, waiting guards exit with the worker (their control socket ends).
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

// waiting reports whether g still waits for its job: a guard that exited
// closed its end of the control socket, and a waiting one writes nothing.
func (g *guardProc) waiting() bool {
	rc, err := g.ctl.SyscallConn()
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
	g.ctl.Close()
	g.stdin.Close()
	_ = g.cmd.Wait()
}

// Run runs a.Command under a guard until it ends, and returns how it
// ended: by itself, or killed by the guard at a.OwnedUntil (which the
// guard keeps to even while this process is frozen), or when ctx is done.
// Its error is for a guard that could not be started, or that reported
// nothing (one that was killed).
func (p *Pool) Run(ctx context.Context, a Attempt) (End, error) {
	if err := ctx.Err(); err != nil {
		return End{}, err
	}
	g, err := p.take()
	if err != nil {
		return End{}, err
	}
	defer g.ctl.Close()
	g.stderr.set(a.Stderr)
	line, err := json.Marshal(job{Deadline: monotonic(a.OwnedUntil()), Command: a.Command, Env: a.Env})
	if err != nil {
		g.release()
		return End{}, fmt.Errorf("exec guard: %w", err)
	}
	if _, err := g.ctl.Write(append(append([]byte(msgJob+" "), line...), '\n')); err != nil {
		g.release()
		return End{}, fmt.Errorf("exec guard: send job: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		// Ends, at the latest, when the guard and all it started are gone.
		defer wg.Done()
		_, _ = io.Copy(g.stdin, bytes.NewReader(a.Stdin))
		g.stdin.Close()
	}()
	stop := make(chan struct{})
	var kill *time.Timer
	go func() {
		defer wg.Done()
		done := ctx.Done()
		for {
			select {
			case <-a.Renewed:
				_ = g.send(msgDeadline + " " + strconv.FormatInt(monotonic(a.OwnedUntil()), 10))
			case <-done:
				done = nil
				_ = g.send(msgCancel)
				kill = time.AfterFunc(killDelay, func() { _ = g.cmd.Process.Kill() })
			case <-stop:
				if kill != nil {
					kill.Stop()
				}
				return
			}
		}
	}()
	werr := g.cmd.Wait()
	close(stop)
	wg.Wait()
	// The guard has exited, and nothing else holds its end: its line, if
	// it wrote one, is there, then end of file. The deadline is only in
	// case a process the guard started with its end open lives on.
	_ = g.ctl.SetReadDeadline(time.Now().Add(time.Second))
	b, _ := io.ReadAll(io.LimitReader(g.ctl, 4096))
	if end, ok := parseEnd(string(b)); ok {
		return end, nil
	}
	if werr == nil {
		werr = errors.New("exited without a report")
	}
	return End{}, fmt.Errorf("exec guard: %w", werr)
}

// send writes one line to the guard.
func (g *guardProc) send(line string) error {
	_, err := io.WriteString(g.ctl, line+"\n")
	return err
}
