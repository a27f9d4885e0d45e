package runtime

import (
	"context"
	"sync"
	"time"
)

// jobContext is the context a handler runs with: cancelled with a cause
// (ErrLeaseLost, ErrCancelled, ErrShutdown…) when the worker stops the
// attempt, and carrying the values of the context Run was given.
//
// It lives in the Job and allocates nothing until someone needs a channel
// from it: a context.WithCancelCause per job cost two allocations, and the
// registration of each job's context among the children of the runtime's
// (a map insert and delete under one lock shared by every job). A handler
// that never waits on its context, or returns before asking, pays none of
// it. Done, a context derived from it (WithTimeout, AfterFunc, a query)
// and context.Cause make the standard cancelCtx it then defers to, so that
// they see exactly what they would see with one: the same channel, the
// same cause.
//
// The runtime's own stop does not reach it through a parent: the completer
// cancels every attempt it owns when work is cancelled (see
// completer.cancelAll), and dispatch cancels one owned after that.
type jobContext struct {
	values context.Context // the context Run was given, without its cancellation

	mu     sync.Mutex
	done   bool
	cause  error
	inner  context.Context // made on demand (see ensure)
	cancel context.CancelCauseFunc
}

// cancelCtxKey is the key by which context.Cause and the derived contexts
// of the standard library find the cancelCtx behind a context: asked for
// it, a jobContext hands over its inner one. It is read once, from the
// key context.Cause asks a probe for.
var cancelCtxKey = func() any {
	var p keyProbe
	_ = context.Cause(&p)
	return p.key
}()

// keyProbe records the first key it is asked for.
type keyProbe struct {
	context.Context
	key any
}

func (*keyProbe) Err() error { return context.Canceled }

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

func (c *jobContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *jobContext) Done() <-chan struct{} { return c.ensure().Done() }

func (c *jobContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return context.Canceled
	}
	return nil
}

func (c *jobContext) Value(key any) any {
	if key == cancelCtxKey {
		return c.ensure().Value(key)
	}
	return c.values.Value(key)
}

func (c *jobContext) String() string { return "fila.jobContext" }

// ensure returns the inner cancelCtx, made now if this is the first need
// for it, and cancelled already if the attempt was. The inner one is
// cancelled under c.mu, so that no one can see this context cancelled and
// its inner one not yet: cancelling a cancelCtx takes no lock of ours.
func (c *jobContext) ensure() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithCancelCause(context.Background())
		if c.done {
			c.cancel(c.cause)
		}
	}
	return c.inner
}

// stop cancels the context with cause (context.Canceled when nil); only the
// first call counts.
func (c *jobContext) stop(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	c.done, c.cause = true, cause
	if c.cancel != nil {
		c.cancel(cause)
	}
}

// causeOf is context.Cause of the context, without making its channel.
func (c *jobContext) causeOf() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}
