package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fila-run/fila/runtime"
)

// ExitPermanent is the exit code with which an --exec command says its job
// failed in a way retrying cannot fix (EX_DATAERR from sysexits.h): the job
// goes to dead at once.
const ExitPermanent = 65

// execWrapper runs the user's command (from FILA_EXEC_COMMAND) in the
// background of a shell that kills its whole process group on SIGTERM. The
// kernel sends that SIGTERM when the worker dies (Pdeathsig), and the worker
// sends it on cancellation. Stdin is passed through fd 3 because a background
// command's stdin would otherwise be /dev/null.
const execWrapper = `exec 3<&0
trap 'kill -KILL 0' TERM
(eval "$FILA_EXEC_COMMAND") <&3 3<&- &
wait $!`

// stderrTail is how much of a failed command's stderr becomes last_error.
const stderrTail = 2048

// execHandler runs command with sh -c for each job: the payload on stdin,
// the job in FILA_JOB_* variables, its stdout to stdout (the worker's own). Exit 0 completes the job, ExitPermanent
// kills it, any other exit is a failed attempt.
func execHandler(command string, stdout io.Writer) runtime.Handler {
	return func(ctx context.Context, job *runtime.Job) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", execWrapper)
		cmd.Stdin = bytes.NewReader(job.Payload)
		cmd.Env = append(os.Environ(),
			"FILA_EXEC_COMMAND="+command,
			"FILA_JOB_ID="+strconv.FormatInt(job.ID, 10),
			"FILA_JOB_KIND="+job.Kind,
			"FILA_JOB_QUEUE="+job.Queue,
			"FILA_JOB_ATTEMPT="+strconv.Itoa(job.Attempt),
			"FILA_JOB_MAX_ATTEMPTS="+strconv.Itoa(job.MaxAttempts),
			"FILA_IDEMPOTENCY_KEY="+job.IdempotencyKey(),
		)
		tail := &tailBuffer{max: stderrTail}
		cmd.Stdout = stdout
		cmd.Stderr = tail
		// Its own process group, so cancellation reaches whatever it started;
		// and if this worker dies (even by SIGKILL), the wrapper is sent
		// SIGTERM by the kernel and kills the group, so the command never runs
		// on beside the worker that rescues the job.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		if err == nil {
			return nil
		}
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return fmt.Errorf("run %q: %w", command, err)
		}
		msg := strings.TrimSpace(tail.String())
		if msg == "" {
			msg = "(no stderr)"
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: command stopped (%v): %s", context.Cause(ctx), exitErr, msg)
		}
		if exitErr.ExitCode() == ExitPermanent {
			return runtime.Permanent(fmt.Errorf("exit %d (permanent): %s", ExitPermanent, msg))
		}
		return fmt.Errorf("%v: %s", exitErr, msg)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}
