package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/execguard"
	"github.com/fila-run/fila/runtime"
)

// ExitPermanent is the exit code with which an --exec command says its job
// failed in a way retrying cannot fix (EX_DATAERR from sysexits.h): the job
// goes to dead at once.
const ExitPermanent = 65

// execGuardCommand is the hidden subcommand that runs the guard between
// the worker and each --exec command (internal/execguard). `fila help`
// does not list it.
const execGuardCommand = "exec-guard"

// selfExe is this very binary, also if its file was replaced or removed
// since the worker started: a guard always speaks its worker's protocol.
const selfExe = "/proc/self/exe"

// spareGuards is how many guards a worker keeps started beyond those
// running jobs, per stdout its commands write to: a guard runs attempt
// after attempt, so these are only for a rise in the attempts at once.
const spareGuards = 2

// guardPools are this process's pools of guards, by the stdout their
// commands write to (the worker's own, in practice only one).
var guardPools struct {
	sync.Mutex
	byStdout map[io.Writer]*execguard.Pool
}

// guardPool returns the pool of guards whose commands write to stdout.
func guardPool(stdout io.Writer) *execguard.Pool {
	newPool := func() *execguard.Pool {
		return execguard.NewPool(func() *exec.Cmd {
			cmd := exec.Command(selfExe, execGuardCommand)
			cmd.Args[0] = "fila"
			cmd.Stdout = stdout
			cmd.Stderr = os.Stderr // the guard's own messages, rare
			return cmd
		}, spareGuards)
	}
	if !reflect.TypeOf(stdout).Comparable() {
		return newPool()
	}
	guardPools.Lock()
	defer guardPools.Unlock()
	p, ok := guardPools.byStdout[stdout]
	if !ok {
		p = newPool()
		if guardPools.byStdout == nil {
			guardPools.byStdout = map[io.Writer]*execguard.Pool{}
		}
		guardPools.byStdout[stdout] = p
	}
	return p
}

// adoptOrphans makes this worker the one that kills what an exec guard
// killed mid-attempt leaves (execguard.AdoptOrphans): a worker's only
// children are its guards. Without it, such processes would go to init
// and outlive their attempt.
func adoptOrphans(log *zap.Logger) {
	if err := execguard.AdoptOrphans(); err != nil {
		log.Warn("processes left by an exec guard that is killed will outlive their attempt", zap.Error(err))
	}
}

// stderrTail is how much of a failed command's stderr becomes last_error.
const stderrTail = 2048

// execHandler runs command with sh -c for each job: the payload on stdin,
// the job in FILA_JOB_* variables (and what middleware adds with
// runtime.WithCommandEnv, such as TRACEPARENT), its stdout to stdout (the
// worker's own). Exit 0 completes the job, ExitPermanent
// kills it, any other exit is a failed attempt.
//
// The command runs under a guard (fila exec-guard, started once and
// reused), which kills its whole tree, every descendant included, when
// the command exits, when the handler's context is done, when this worker
// dies, and at the attempt's deadline (job.OwnedUntil, sent again at each
// renewal), the last even while this worker is frozen and cannot say
// anything. What a guard killed mid-attempt leaves, this worker kills
// (see adoptOrphans).
func execHandler(command string, stdout io.Writer) runtime.Handler {
	guards := guardPool(stdout)
	return func(ctx context.Context, job *runtime.Job) error {
		tail := &tailBuffer{max: stderrTail}
		end, err := guards.Run(ctx, execguard.Attempt{
			Command: command,
			// Added to the worker's own environment, which its guards have.
			Env: append([]string{
				"FILA_EXEC_COMMAND=" + command,
				"FILA_JOB_ID=" + strconv.FormatInt(job.ID, 10),
				"FILA_JOB_KIND=" + job.Kind,
				"FILA_JOB_QUEUE=" + job.Queue,
				"FILA_JOB_ATTEMPT=" + strconv.Itoa(job.Attempt),
				"FILA_JOB_MAX_ATTEMPTS=" + strconv.Itoa(job.MaxAttempts),
				"FILA_IDEMPOTENCY_KEY=" + job.IdempotencyKey(),
			}, runtime.CommandEnv(ctx)...), // what middleware passes on, such as TRACEPARENT
			Stdin:      job.Payload,
			Stderr:     tail,
			OwnedUntil: job.OwnedUntil,
			Renewed:    job.Renewed(),
		})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: command stopped: %v", context.Cause(ctx), err)
			}
			return fmt.Errorf("run %q: %w", command, err)
		}
		if end.How == execguard.Exited && end.Code == 0 {
			return nil
		}
		if end.How == execguard.Failed {
			return fmt.Errorf("run %q: %s", command, end.Detail)
		}
		msg := strings.TrimSpace(tail.String())
		if msg == "" {
			msg = "(no stderr)"
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%w: command stopped (%v): %s", context.Cause(ctx), end, msg)
		case end.How == execguard.Deadline:
			// The guard's clock ran out before the runtime's own timer
			// cancelled the handler: the same deadline, seen first.
			return fmt.Errorf("%w: command stopped (%v): %s", runtime.ErrLeaseDeadline, end, msg)
		case end.How == execguard.Exited && end.Code == ExitPermanent:
			return runtime.Permanent(fmt.Errorf("exit %d (permanent): %s", ExitPermanent, msg))
		}
		return fmt.Errorf("%v: %s", end, msg)
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
