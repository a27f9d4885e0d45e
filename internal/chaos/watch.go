package chaos

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// watchEvery is how often a runWatch reads its run file and looks at the
// processes of the commands in /proc.
const watchEvery = time.Millisecond

// runWatch follows a run file while the commands that write it run, and
// watches the processes each reports (its shell, and the children it says
// it started): a command killed by a signal cannot write its end, so its
// run ends when the last of its processes is last seen alive. A zombie
// counts as dead. Every time it keeps is on the wall clock, as run files'
// are.
type runWatch struct {
	path string

	mu      sync.Mutex
	set     runSet
	f       *os.File
	partial []byte
	err     error
	polls   int
	stopped bool

	stopc chan struct{}
	done  chan struct{}
}

// watchRuns starts watching the run file at path (which need not exist yet).
func watchRuns(path string) *runWatch {
	w := &runWatch{path: path, stopc: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *runWatch) loop() {
	defer close(w.done)
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		w.poll()
		select {
		case <-w.stopc:
			return
		case <-t.C:
		}
	}
}

// poll reads what the file gained and looks at every process not yet seen
// dead.
func (w *runWatch) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	w.read()
	for _, r := range w.set.runs {
		for _, p := range r.procs {
			if p.dead {
				continue
			}
			before := wall(time.Now())
			ident, alive := procState(p.pid)
			switch {
			case alive && (p.ident == "" || p.ident == ident):
				// Alive at least until this look began.
				p.ident, p.lastAlive = ident, before
			default:
				// Gone, a zombie, or its pid taken by another process.
				p.dead = true
			}
		}
	}
}

// read parses the lines appended since the last read.
func (w *runWatch) read() {
	if w.f == nil {
		f, err := os.Open(w.path)
		if err != nil {
			if !os.IsNotExist(err) && w.err == nil {
				w.err = err
			}
			return
		}
		w.f = f
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		w.partial = append(w.partial, buf[:n]...)
		if err != nil {
			if !errors.Is(err, io.EOF) && w.err == nil {
				w.err = err
			}
			break
		}
		if n == 0 {
			break
		}
	}
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if l, ok := parseRunLine(line); ok {
			w.set.add(l)
		}
	}
}

// runs returns the runs as they stand now (see runSet.snapshot).
func (w *runWatch) runs() ([]run, error) {
	if !w.isStopped() {
		// Whatever was written before this call is read now, not at the
		// next tick.
		w.poll()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.set.snapshot(), w.err
}

// polls reports how many times the watch has looked.
func (w *runWatch) pollCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls
}

func (w *runWatch) isStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// stop ends the watch; runs keeps answering with what it saw. It may be
// called again.
func (w *runWatch) stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.stopc)
	<-w.done
	w.mu.Lock()
	if w.f != nil {
		_ = w.f.Close()
	}
	w.mu.Unlock()
}

// killAlive kills, with SIGKILL, every watched process still alive (and
// still the process it was: same start time), so that nothing a scenario
// started outlives it.
func (w *runWatch) killAlive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.set.runs {
		for _, p := range r.procs {
			if p.dead {
				continue
			}
			if ident, alive := procState(p.pid); alive && ident == p.ident {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
}

// procState reads /proc/PID/stat: whether the process is alive (a zombie
// is not), and its start time, which tells it from a later process that
// got the same pid.
func procState(pid int) (ident string, alive bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 20 {
		return "", false
	}
	switch fs[0] {
	case "Z", "X", "x":
		return "", false
	}
	return fs[19], true
}
