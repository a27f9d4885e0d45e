package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
)

// group is one runtime of a worker process, with the name its logs and
// errors carry ("" for the one runtime of `fila work` without --config).
type group struct {
	name string
	rt   *runtime.Runtime
}

// label is how errors name the group: "group NAME: ", or nothing.
func (g group) label() string {
	if g.name == "" {
		return ""
	}
	return "group " + g.name + ": "
}

// supervise runs every group until the first signal (ctx) or until one of
// them stops by itself, then stops them all together: each stops claiming
// and lets its running handlers finish for shutdown, and a later signal
// cancels every handler at once. It returns nil after a stop asked for by a
// signal; otherwise the error of the first group that stopped, naming it.
func supervise(ctx context.Context, groups []group, shutdown time.Duration, later <-chan os.Signal, log *zap.Logger) error {
	// A later signal cancels the runtimes' own context, their hard stop,
	// rather than the drain's deadline: nothing passed a deadline.
	runCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	type result struct {
		g   group
		err error
	}
	results := make(chan result, len(groups))
	for _, g := range groups {
		go func() { results <- result{g, g.rt.Run(runCtx)} }()
	}

	pending := len(groups)
	var failed error
	select {
	case r := <-results:
		pending--
		failed = r.err
		if failed == nil {
			failed = errors.New("stopped by itself")
		}
		failed = fmt.Errorf("%s%w", r.g.label(), failed)
		if len(groups) > 1 {
			log.Error("a group stopped; stopping the others", zap.String("group", r.g.name), zap.Error(r.err))
		}
	case <-ctx.Done():
		log.Info("stopping: finishing running jobs", zap.Duration("shutdown_timeout", shutdown))
	}

	stopCtx, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	go func() {
		select {
		case <-later:
			log.Warn("second signal: cancelling running jobs")
			hardStop()
		case <-stopCtx.Done():
		}
	}()
	var stops sync.WaitGroup
	for _, g := range groups {
		stops.Go(func() { stopGroup(stopCtx, g.rt) })
	}
	for ; pending > 0; pending-- {
		r := <-results
		if r.err != nil {
			if failed == nil {
				failed = fmt.Errorf("%s%w", r.g.label(), r.err)
			} else {
				log.Error("group stopped with an error", zap.String("group", r.g.name), zap.Error(r.err))
			}
		}
	}
	stops.Wait()
	return failed
}

// stopGroup stops one runtime gracefully and returns once its Run has
// returned. Another group may fail before this one's goroutine reached Run:
// a Stop that comes first makes that Run return at once.
func stopGroup(ctx context.Context, rt *runtime.Runtime) {
	_ = rt.Stop(ctx) // its error says handlers were cancelled: they were meant to be
	<-rt.Done()
}
