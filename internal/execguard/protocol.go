// Package execguard is the guard that stands between a worker and each
// `fila work --exec` command, so that a command never outlives its attempt.
//
// A guard is the fila binary itself, run as the hidden `fila exec-guard`,
// in a process group of its own; the worker keeps one end of a socket pair
// and the guard gets the other as file descriptor ControlFD. Starting one
// costs far more than the rest of a pickup (the Go runtime and every
// package's init), so a guard runs job after job, one at a time, for as
// long as its worker lives: the worker keeps a pool of them (see Pool),
// one per attempt running at once. A guard is a child subreaper, so that
// every orphaned descendant of its command (double-forked, setsid,
// daemonised) is reparented to it; with one attempt at a time, all it has
// below it is that attempt's. For each job it runs `sh -c COMMAND` with the
// job's standard input and error (descriptors that come with the job) and
// the guard's standard output, and kills the command's whole tree
//
//   - at the attempt's deadline, an absolute CLOCK_MONOTONIC time the worker
//     sends with the job and again each time the lease is renewed: a worker
//     that is frozen (SIGSTOP, Ctrl-Z) or whose goroutines do not run sends
//     nothing, and the tree dies on time all the same;
//   - at once when the worker says cancel, or when its end of the socket
//     closes (the worker died, even by SIGKILL): the guard then exits;
//   - at once when the command itself exits, whatever its children still
//     hold open: the command's exit ends the attempt.
//
// Once the tree is gone, the guard reports how the command ended (see End)
// and waits for the next job. A guard killed while its command runs takes
// the command with it (its parent-death signal), and the command's
// descendants are reparented to the worker, which kills them when it has
// made itself a subreaper too (AdoptOrphans), as `fila work` does.
//
// Linux only: it relies on PR_SET_CHILD_SUBREAPER and /proc.
package execguard

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ControlFD is the guard's end of its control socket: the first of the
// worker's exec.Cmd.ExtraFiles.
const ControlFD = 3

// Exit statuses of the guard besides the command's own, which it passes on
// (128 plus the signal for a command ended by a signal, as sh does). They
// are those of timeout(1). The line the guard writes on its control socket,
// not its status, is what says how the command ended.
const (
	// ExitKilled is the guard's status when it killed the command: at the
	// deadline, on cancel, on the worker's end of file or on a signal.
	ExitKilled = 124
	// ExitFailed is the guard's status when it could not run the command.
	ExitFailed = 125
)

// The messages the worker sends its guard, one per SOCK_SEQPACKET record:
//
//	job JSON      the attempt to run (see job), with two descriptors: the
//	              command's standard input and its standard error
//	deadline NS   the attempt now ends at NS: kill the command's tree then,
//	              unless another deadline comes
//	cancel        kill it now
//
// End of file kills it now too, and ends the guard. Between jobs a guard
// ignores a deadline or a cancel: one sent for the attempt that just ended
// crossed its report. The guard answers each job with one record, how the
// command ended (End.encode), after lastWord and a space when it exits next.
const (
	msgJob      = "job"
	msgDeadline = "deadline"
	msgCancel   = "cancel"
	lastWord    = "last"
)

// maxMessage bounds one record of either side: a job's command and the
// variables it adds to the environment.
const maxMessage = 256 << 10

// job is the attempt a guard runs.
type job struct {
	// Deadline is when the attempt ends unless a deadline line moves it, in
	// CLOCK_MONOTONIC nanoseconds: an absolute time, so however late a line
	// is read it cannot make the deadline later.
	Deadline int64  `json:"deadline"`
	Command  string `json:"command"` // run with sh -c
	// Env is added to the guard's own environment, the worker's, for the
	// command: sending only what the job adds keeps the worker's own
	// environment off every job's path.
	Env []string `json:"env,omitempty"`
}

// How says how an attempt's command ended.
type How int

const (
	// Exited: the command exited by itself; Code is its exit status.
	Exited How = iota + 1
	// Signalled: a signal the guard did not send ended it; Code is the
	// signal's number.
	Signalled
	// Deadline: the guard killed it at the attempt's deadline.
	Deadline
	// Cancelled: the guard killed it when the worker said cancel.
	Cancelled
	// Terminated: the guard was sent signal Code (SIGTERM, SIGINT or
	// SIGHUP) and killed it.
	Terminated
	// Failed: the guard could not run the command; Detail says why.
	Failed
)

// End is how an attempt's command ended, as its guard reports it.
type End struct {
	How    How
	Code   int
	Detail string
}

// String says it the way os.ProcessState does ("exit status 3", "signal:
// killed") for a command that ended by itself.
func (e End) String() string {
	switch e.How {
	case Exited:
		return "exit status " + strconv.Itoa(e.Code)
	case Signalled:
		return "signal: " + syscall.Signal(e.Code).String()
	case Deadline:
		return "killed by its guard at the attempt's lease deadline"
	case Cancelled:
		return "killed by its guard on cancellation"
	case Terminated:
		return "killed by its guard, which got signal " + syscall.Signal(e.Code).String()
	case Failed:
		return e.Detail
	}
	return fmt.Sprintf("unknown end %d", e.How)
}

// status is the guard's exit status for e.
func (e End) status() int {
	switch e.How {
	case Exited:
		return e.Code
	case Signalled:
		return 128 + e.Code
	case Failed:
		return ExitFailed
	}
	return ExitKilled
}

// encode is the line the guard writes for e, without its newline.
func (e End) encode() string {
	switch e.How {
	case Exited:
		return "exit " + strconv.Itoa(e.Code)
	case Signalled:
		return "signal " + strconv.Itoa(e.Code)
	case Deadline:
		return "deadline"
	case Cancelled:
		return "cancel"
	case Terminated:
		return "terminated " + strconv.Itoa(e.Code)
	}
	return "failed " + strings.ReplaceAll(e.Detail, "\n", " ")
}

// parseReport reads a guard's report: how the command ended, and whether
// the guard exits next.
func parseReport(line string) (e End, last, ok bool) {
	if rest, cut := strings.CutPrefix(line, lastWord+" "); cut {
		line, last = rest, true
	}
	e, ok = parseEnd(line)
	return e, last, ok
}

// parseEnd reads the line encode wrote.
func parseEnd(line string) (End, bool) {
	word, arg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	code := func(h How) (End, bool) {
		n, err := strconv.Atoi(arg)
		return End{How: h, Code: n}, err == nil
	}
	switch word {
	case "exit":
		return code(Exited)
	case "signal":
		return code(Signalled)
	case "terminated":
		return code(Terminated)
	case "deadline":
		return End{How: Deadline}, arg == ""
	case "cancel":
		return End{How: Cancelled}, arg == ""
	case "failed":
		return End{How: Failed, Detail: arg}, true
	}
	return End{}, false
}

// monoNow is CLOCK_MONOTONIC now, in nanoseconds. Go's own monotonic
// readings come from the same clock, but count from the start of each
// process; this one is the same in the worker and in the guard.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return ts.Nano()
}

// clockPair is one CLOCK_MONOTONIC reading and the time.Now taken just
// after it, to convert this process's times to CLOCK_MONOTONIC.
var clockPair = sync.OnceValues(func() (int64, time.Time) {
	mono := monoNow()
	return mono, time.Now()
})

// monotonic converts t, a time with a monotonic reading, to CLOCK_MONOTONIC
// nanoseconds. The clock is read before time.Now, so the result is early
// by the few nanoseconds between them, never late.
func monotonic(t time.Time) int64 {
	mono, at := clockPair()
	return mono + int64(t.Sub(at))
}
