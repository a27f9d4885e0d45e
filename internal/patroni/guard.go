package patroni

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// guardScript is run by /bin/sh with the cluster's directory in
// FILA_PATRONI_DIR (in the environment, not on its command line, so the
// sweep never matches the guard itself). It waits for end-of-file on its
// standard input, then:
//
//  1. kills the Patroni daemons, which would otherwise start PostgreSQL
//     again;
//  2. asks every postmaster of the cluster for an immediate shutdown
//     (SIGQUIT), which, unlike SIGKILL, removes its shared memory, and
//     waits up to five seconds for them;
//  3. kills whatever still runs from the directory (etcd, a postmaster that
//     did not stop);
//  4. removes the directory.
//
// A process belongs to the cluster when its command line names the
// directory: Patroni's names its configuration file, a postmaster's its data
// directory (postmasters keep their command line; only their children
// rewrite theirs, and those exit when their postmaster does), etcd's its
// data directory. pkill and pgrep (procps) read every command line in one
// process: a sweep that started one per entry of /proc took 1.6 s at a
// load of 21, and the wait for the postmasters, 50 such sweeps, outlasted
// Close's limit. The wait is bounded by the clock, not by a count of
// passes.
const guardScript = `
dir=$FILA_PATRONI_DIR
re=$(printf '%s' "$dir" | sed 's/[][\\.*^$+?(){}|]/\\&/g')
read -r _
pkill -KILL -f -- "$re/.*/patroni[.]yml"
pkill -QUIT -f -- "-D $re/"
until=$(($(date +%s) + 5))
while pgrep -f -- "-D $re/" >/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 0.1; done
pkill -KILL -f -- "$re"
rm -rf "$dir"
`

// guard is the process that cleans the cluster up once its pipe closes.
type guard struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; closing it (or dying) starts the cleanup
	done chan struct{}
}

// startGuard starts the guard of dir. It runs as this process's own user
// (root may stop the postgres user's processes and remove their files), in a
// process group of its own, so a Ctrl-C meant for `go test` reaches the test
// binary, whose death then closes the pipe, and not the guard first.
func startGuard(dir string) (*guard, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits the write end
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", guardScript)
	cmd.Env = append(os.Environ(), "FILA_PATRONI_DIR="+dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("start the guard: %w", err)
	}
	_ = r.Close() // the guard holds it now
	g := &guard{cmd: cmd, pipe: w, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	return g, nil
}

// finish closes the pipe and waits (at most limit) for the guard's cleanup.
func (g *guard) finish(limit time.Duration) error {
	_ = g.pipe.Close()
	select {
	case <-g.done:
		return nil
	case <-time.After(limit):
		_ = g.cmd.Process.Kill()
		<-g.done
		return fmt.Errorf("the guard did not finish its cleanup within %v", limit)
	}
}

// processesOf lists the live processes whose command line names dir, as the
// guard finds them.
func processesOf(dir string) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, p := range entries {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain any character.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
