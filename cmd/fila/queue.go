package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

func init() {
	register("queue", "pause or resume a queue, or list the paused ones: queue pause|resume QUEUE, queue paused", runQueue)
	describeArgs("queue", "pause|resume QUEUE | paused")
}

func runQueue(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return g.usageError("say pause QUEUE, resume QUEUE or paused")
	}
	verb := pos[0]
	switch verb {
	case "pause", "resume":
		if len(pos) != 2 {
			return g.usageError("%s takes one queue name", verb)
		}
		if err := channel.ValidateQueue(pos[1]); err != nil {
			return fmt.Errorf("%s: %w", verb, err)
		}
	case "paused":
		if len(pos) != 1 {
			return g.usageError("paused takes no argument")
		}
	default:
		return g.usageError("%q is not pause, resume or paused", verb)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch verb {
	case "pause":
		if err := runtime.PauseQueue(ctx, pool, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "paused queue %s: its jobs stay pending from every worker's next claim; running ones finish\n", pos[1])
	case "resume":
		was, err := runtime.ResumeQueue(ctx, pool, pos[1])
		if err != nil {
			return err
		}
		if was {
			fmt.Fprintf(g.stdout, "resumed queue %s: its workers are woken now\n", pos[1])
		} else {
			fmt.Fprintf(g.stdout, "queue %s was not paused\n", pos[1])
		}
	case "paused":
		qs, err := runtime.PausedQueues(ctx, pool)
		if err != nil {
			return err
		}
		if len(qs) == 0 {
			fmt.Fprintln(g.stdout, "no queue is paused")
		}
		for _, q := range qs {
			fmt.Fprintln(g.stdout, q)
		}
	}
	return nil
}
