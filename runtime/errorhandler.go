package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"time"

	"go.uber.org/zap"
)

// ErrorHandler is told of every failed attempt, where a team reports it
// (Sentry, an alert), as River's ErrorHandler is. It is called once per
// failed attempt, on the attempt's goroutine after its handler returned and
// before its outcome is written, so it holds the attempt's slot while it
// runs: it should return promptly. Attempts that did not fail (a snooze, a
// cancellation, a lost lease, a shutdown) are not failures. A panic of its
// own is recovered and logged, and the attempt's outcome is what it would
// have been without the ErrorHandler.
type ErrorHandler interface {
	// HandleError is called with the error a handler returned (or its
	// timeout). ctx carries the attempt's values, but not its cancellation.
	HandleError(ctx context.Context, job *Job, err error) *ErrorHandlerResult
	// HandlePanic is called instead of HandleError when the handler
	// panicked, with the value it panicked with and the stack of the
	// goroutine that panicked.
	HandlePanic(ctx context.Context, job *Job, value any, stack []byte) *ErrorHandlerResult
}

// ErrorHandlerResult is what an ErrorHandler decides for the attempt; nil
// leaves the outcome as the error makes it (a retry, or dead once the
// attempts are spent or the error is Permanent).
type ErrorHandlerResult struct {
	// Dead makes the job dead now, as a Permanent error would: no further
	// attempt.
	Dead bool
}

// PanicError is the error a handler's panic becomes: what the job's
// last_error records and what middleware sees returned by next. Find it
// with errors.As.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the stack of the goroutine that panicked, at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v\n%s", e.Value, e.Stack) }

// panicStackMax bounds a panic's recorded stack.
const panicStackMax = 16 << 10

// panicError is the error a recovered panic becomes: its value and the
// stack of the goroutine that panicked.
func panicError(p any) error {
	buf := make([]byte, panicStackMax)
	return &PanicError{Value: p, Stack: buf[:goruntime.Stack(buf, false)]}
}

// handleFailure tells the ErrorHandler of the failed attempt res, and
// applies its decision. Not inlined: execute's frame stays small (see
// submit).
//
//go:noinline
func (r *Runtime) handleFailure(ctx context.Context, job *Job, res *result) {
	ctx = context.WithoutCancel(ctx)
	var decision *ErrorHandlerResult
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("ErrorHandler panicked; the attempt's outcome stands as without it",
					zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Int("attempt", job.Attempt),
					zap.Any("panic", p), zap.ByteString("stack", stack()))
			}
		}()
		var pe *PanicError
		if errors.As(res.err, &pe) {
			decision = r.cfg.ErrorHandler.HandlePanic(ctx, job, pe.Value, pe.Stack)
		} else {
			decision = r.cfg.ErrorHandler.HandleError(ctx, job, res.err)
		}
	}()
	if decision != nil && decision.Dead {
		res.permanent = true
	}
}

// stack is the current goroutine's stack.
func stack() []byte {
	buf := make([]byte, panicStackMax)
	return buf[:goruntime.Stack(buf, false)]
}

// StuckJobHandler is told once of an attempt whose handler has run longer
// than Config.StuckAfter: running is how long it has run. It is called on
// a goroutine of its own while the handler still runs; the attempt goes
// on. ctx carries the attempt's values, but not its cancellation.
type StuckJobHandler func(ctx context.Context, job *Job, running time.Duration)

// watchStuck calls the StuckJobHandler (or logs) once job's handler,
// started at start, has run StuckAfter; the caller stops the timer when
// the handler returns.
//
//go:noinline
func (r *Runtime) watchStuck(ctx context.Context, job *Job, start time.Time) *time.Timer {
	ctx = context.WithoutCancel(ctx)
	return time.AfterFunc(r.cfg.StuckAfter, func() {
		running := time.Since(start)
		r.log.Warn("job handler still running after StuckAfter", zap.Int64("job_id", job.ID), zap.String("kind", job.Kind),
			zap.Int("attempt", job.Attempt), zap.Duration("running", running))
		if r.cfg.StuckJobHandler == nil {
			return
		}
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("StuckJobHandler panicked", zap.Int64("job_id", job.ID), zap.Any("panic", p), zap.ByteString("stack", stack()))
			}
		}()
		r.cfg.StuckJobHandler(ctx, job, running)
	})
}
