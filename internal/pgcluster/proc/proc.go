// Package proc runs the throwaway servers of the test infrastructure
// (PostgreSQL, PgBouncer) as child processes that cannot outlive the test.
//
// Both servers refuse to run as root, and the test machines run as root, so
// when the effective uid is 0 the children run as the "postgres" system user.
// Every child gets Pdeathsig SIGKILL: a test binary killed by a timeout or by
// hand takes its servers with it instead of leaving them on a port. Each child
// also runs in its own process group, so a Ctrl-C meant for `go test` does not
// shut the servers down under the test's feet.
package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ServerUser is the system user servers run as when we are root.
const ServerUser = "postgres"

// Owner is the identity server processes and their files belong to.
type Owner struct {
	cred *syscall.Credential // nil: run as ourselves
}

// CurrentOwner returns the identity to run servers as: ServerUser when the
// effective uid is 0, else the current user.
func CurrentOwner() (*Owner, error) {
	if os.Geteuid() != 0 {
		return &Owner{}, nil
	}
	u, err := user.Lookup(ServerUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL tools refuse root: look up user %q: %w", ServerUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q: %w", ServerUser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q: %w", ServerUser, u.Gid, err)
	}
	// Groups empty: drop root's supplementary groups.
	return &Owner{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}, nil
}

// Chown gives paths to the owner (a no-op when running as ourselves).
func (o *Owner) Chown(paths ...string) error {
	if o.cred == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, int(o.cred.Uid), int(o.cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// Command prepares a long-lived server to run as the owner, in its own
// process group, killed when this process dies.
func (o *Owner) Command(name string, args ...string) *exec.Cmd {
	return o.setup(exec.Command(name, args...))
}

// CommandContext is Command for a short-lived tool that ctx may kill.
func (o *Owner) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	return o.setup(exec.CommandContext(ctx, name, args...))
}

func (o *Owner) setup(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: o.cred,
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
	return cmd
}

// Process is a started child whose exit is observed by one goroutine.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// Start starts cmd and watches for its exit.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit status once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig unless the process has already exited.
func (p *Process) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Stop sends sig and waits for the exit; after grace (if positive) it sends
// SIGKILL and waits again. It returns the error of sending a signal, not the
// exit status: a server stopped by a signal always "fails".
func (p *Process) Stop(sig os.Signal, grace time.Duration) error {
	if err := p.Signal(sig); err != nil {
		return err
	}
	if grace <= 0 {
		<-p.done
		return nil
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// FreePort returns a loopback TCP port that nothing listens on now. The port
// is free only until someone takes it: callers retry with another one when
// their server cannot bind. Ports handed out by this process are not handed
// out twice, so parallel tests in one binary do not race each other.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !ports[port] {
			ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find a free port: the kernel keeps returning ports already used")
}

// Tail returns at most the last max bytes of the file at path (empty when it
// cannot be read), for error messages.
func Tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return string(buf[:n])
}
