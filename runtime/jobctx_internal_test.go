package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

func newTestJobContext() *jobContext {
	return &jobContext{values: context.WithValue(context.Background(), ctxKey{}, "v")}
}

// A handler's context behaves as a context.WithCancelCause would, whether
// its channel was asked for before the stop, after it, or never.
func TestJobContextBehavesAsACancelCtx(t *testing.T) {
	require.NotNil(t, cancelCtxKey, "the key context.Cause asks for was read")

	for _, askFirst := range []bool{true, false} {
		c := newTestJobContext()
		var ctx context.Context = c
		require.Equal(t, "v", ctx.Value(ctxKey{}), "values come from Run's context")
		require.NoError(t, ctx.Err())
		require.NoError(t, context.Cause(ctx))
		var done <-chan struct{}
		if askFirst {
			done = ctx.Done()
			select {
			case <-done:
				t.Fatal("closed before the stop")
			default:
			}
		}
		c.stop(ErrLeaseLost)
		c.stop(ErrCancelled) // only the first counts
		if !askFirst {
			done = ctx.Done()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed by the stop")
		}
		require.ErrorIs(t, ctx.Err(), context.Canceled, "asked first: %v", askFirst)
		require.ErrorIs(t, context.Cause(ctx), ErrLeaseLost, "asked first: %v", askFirst)
		require.ErrorIs(t, c.causeOf(), ErrLeaseLost)
	}
}

// Contexts derived from it — a timeout, an AfterFunc — end with it, and see
// its cause.
func TestJobContextReachesDerivedContexts(t *testing.T) {
	c := newTestJobContext()
	child, cancel := context.WithTimeout(c, time.Hour)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	c.stop(ErrCancelled)
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the derived context was not cancelled")
	}
	require.ErrorIs(t, context.Cause(child), ErrCancelled)
	require.Equal(t, "v", child.Value(ctxKey{}))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}

	// Derived after the stop: cancelled at once.
	late, cancelLate := context.WithCancel(c)
	defer cancelLate()
	require.ErrorIs(t, context.Cause(late), ErrCancelled)
}

// A nil cause reads as context.Canceled, as with WithCancelCause.
func TestJobContextNilCause(t *testing.T) {
	c := newTestJobContext()
	c.stop(nil)
	require.ErrorIs(t, context.Cause(c), context.Canceled)
	require.True(t, errors.Is(c.Err(), context.Canceled))
}

// Until its channel is needed it allocates nothing: the drain's handlers
// pay no context per job.
func TestJobContextAllocatesNothingUntilAsked(t *testing.T) {
	values := context.Background()
	job := &Job{}
	allocs := testing.AllocsPerRun(100, func() {
		job.ctx = jobContext{values: values}
		_ = job.ctx.Err()
		job.ctx.stop(ErrLeaseLost)
		_ = job.ctx.causeOf()
	})
	require.Zero(t, allocs)
}

// A stop beside goroutines asking for its channel: every one sees it closed
// with the cause (run with -race).
func TestJobContextConcurrentStop(t *testing.T) {
	for range 50 {
		c := newTestJobContext()
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-c.Done()
				if !errors.Is(context.Cause(c), ErrShutdown) {
					t.Errorf("cause %v", context.Cause(c))
				}
			}()
		}
		c.stop(ErrShutdown)
		wg.Wait()
	}
}
