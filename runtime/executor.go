package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// resultKind is what became of one attempt's handler.
type resultKind int

const (
	resultOK            resultKind = iota // returned nil: complete the job
	resultFailed                          // returned an error or panicked: retry or dead
	resultCompletedInTx                   // completed in the handler's own transaction: nothing to write
	resultLeaseLost                       // the lease was lost: another worker may own the job
	resultCancelled                       // an operator cancelled the job
	resultInterrupted                     // a hard stop interrupted it: give the job back
	resultSnoozed                         // the handler asked to run later: pending again, its attempt given back
)

// result is one attempt's handler result, mapped.
type result struct {
	kind      resultKind
	err       error
	permanent bool
	delay     time.Duration // retry backoff
	took      time.Duration
}

// execute runs one attempt's handler and hands its result to the completer.
// The handler's context is the job's own (job.ctx), through which the
// completer stops a handler whose lease was lost or whose job was
// cancelled.
func (r *Runtime) execute(job *Job) {
	ctx := &job.ctx
	start := time.Now()
	var stuck *time.Timer
	if r.cfg.StuckAfter > 0 {
		stuck = r.watchStuck(ctx, job, start)
	}
	err := r.runHandler(ctx, job)
	if stuck != nil {
		stuck.Stop()
	}
	cause := job.ctx.causeOf()
	job.ctx.stop(nil)
	res := r.mapResult(job, err, cause)
	res.took = time.Since(start)
	if res.kind == resultFailed && r.cfg.ErrorHandler != nil {
		r.handleFailure(ctx, job, &res)
	}
	r.completer.finish(job, res)
}

// runHandler calls the kind's handler with its timeout.
func (r *Runtime) runHandler(ctx context.Context, job *Job) error {
	kind, known := r.kinds[job.Kind]
	if !known {
		// Claims take only this worker's kinds, so this is a row whose kind
		// changed under the claim. Retry rather than kill: another worker may
		// know the kind.
		return fmt.Errorf("no handler for kind %q on this worker (it handles %s)", job.Kind, strings.Join(r.kindNames, ", "))
	}
	return runKind(ctx, kind, job)
}

// runKind calls kind's handler (middleware included) for job, with the
// job's timeout or else the kind's.
func runKind(ctx context.Context, kind Kind, job *Job) error {
	hctx := ctx
	timeout := kind.Timeout
	if t := job.policy().timeout(); t > 0 {
		timeout = t // the job's own, from its insert
	}
	if timeout > 0 {
		var c context.CancelFunc
		hctx, c = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %s", timeout))
		defer c()
	}
	err := call(hctx, kind.Handler, job)
	if err != nil && hctx.Err() != nil && ctx.Err() == nil {
		// The kind's timeout stopped it. Say so once: a handler that
		// returned the cause (or the bare deadline) already says it.
		timeout := context.Cause(hctx)
		if !errors.Is(err, timeout) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w; the handler returned: %w", timeout, err)
		}
		if !errors.Is(err, timeout) {
			return timeout
		}
	}
	return err
}

// mapResult decides what an attempt's handler result means.
func (r *Runtime) mapResult(job *Job, err error, cause error) result {
	return mapResult(job, err, cause, r.kinds[job.Kind].Backoff, RetryPolicy{Base: r.cfg.RetryBase, Max: r.cfg.RetryMax})
}

// mapResult decides what an attempt's handler result means: cause is its
// context's cancellation cause, backoff the kind's retry policy (nil for
// none) and def the runtime's.
func mapResult(job *Job, err error, cause error, backoff func(int) time.Duration, def RetryPolicy) result {
	switch {
	case err == nil && job.completedInTx.Load():
		// Completed in the handler's own transaction: nothing left to write.
		// Checked before a lost lease: a heartbeat that runs between that
		// commit and the handler's return finds the row no longer running
		// and cancels the handler, but the completion is already committed
		// (CompleteTx is fenced on the attempt, so it only succeeds while
		// the lease is this worker's).
		return result{kind: resultCompletedInTx}
	case errors.Is(cause, ErrLeaseLost), errors.Is(err, ErrLeaseLost):
		// Also when the handler saw the deadline before the runtime's own
		// timer did (the guard of an --exec command keeps a clock of its
		// own, so it may fire first).
		return result{kind: resultLeaseLost, err: err}
	case errors.Is(cause, ErrCancelled):
		return result{kind: resultCancelled, err: err}
	case err == nil:
		return result{kind: resultOK}
	case errors.Is(cause, ErrShutdown):
		// Interrupted by a hard stop: give the job back now rather than
		// waiting for its lease. Not a failure of the job.
		return result{kind: resultInterrupted, err: err}
	}
	var snooze snoozeError
	if errors.As(err, &snooze) && cause == nil {
		return result{kind: resultSnoozed, delay: snooze.d}
	}
	var delay time.Duration
	if p, ok := job.policy().retry(); ok {
		delay = p.Backoff(job.Attempt) // the job's own, from its insert
	} else if backoff != nil {
		delay = max(backoff(job.Attempt), 0)
	} else {
		delay = def.Backoff(job.Attempt)
	}
	var after retryAfterError
	if errors.As(err, &after) {
		delay = after.d
	}
	return result{kind: resultFailed, err: err, permanent: IsPermanent(err), delay: delay}
}

// call runs h, turning a panic into an error with its stack. Each kind's
// own handler is wrapped by recovering inside its middleware, so this one
// only sees a panic of a middleware itself.
func call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError(p)
		}
	}()
	return h(ctx, job)
}

// recovering wraps a kind's handler, innermost, so that its panic reaches
// every middleware as an error, with the stack, as any failure of the
// handler does: a middleware that records next's error (metrics, a
// tracing span, an error reporter) sees it.
func recovering(h Handler) Handler {
	return func(ctx context.Context, job *Job) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = panicError(p)
			}
		}()
		return h(ctx, job)
	}
}
