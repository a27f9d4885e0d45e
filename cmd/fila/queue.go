package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

func init() {
	register("queue", "list or show queues, pause or resume one, or list the paused ones: queue list, queue show QUEUE, queue pause [--force] QUEUE, queue resume QUEUE, queue paused", runQueue)
	describeArgs("queue", "list [--json] | show [--json] QUEUE | pause [--force] QUEUE | resume QUEUE | paused")
}

func runQueue(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "list and show: print JSON")
	force := fs.Bool("force", false, "pause a queue no worker has served and no job is pending or running in (ahead of its first job); without it such a name is refused as a likely typo")
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return g.usageError("say list, show QUEUE, pause QUEUE, resume QUEUE or paused")
	}
	verb := pos[0]
	switch verb {
	case "pause", "resume", "show":
		if len(pos) != 2 {
			return g.usageError("%s takes one queue name", verb)
		}
		if err := channel.ValidateQueue(pos[1]); err != nil {
			return fmt.Errorf("%s: %w", verb, err)
		}
	case "paused", "list":
		if len(pos) != 1 {
			return g.usageError("%s takes no argument", verb)
		}
	default:
		return g.usageError("%q is not list or show, and not pause, resume or paused", verb)
	}
	if *asJSON && verb != "list" && verb != "show" {
		return g.usageError("--json is for list and show only")
	}
	if *force && verb != "pause" {
		return g.usageError("--force is for pause only")
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	switch verb {
	case "list", "show":
		var qs []runtime.QueueInfo
		if verb == "list" {
			if qs, err = runtime.ListQueues(ctx, pool); err != nil {
				return err
			}
		} else {
			q, err := runtime.DescribeQueue(ctx, pool, pos[1])
			if err != nil {
				return err
			}
			qs = []runtime.QueueInfo{q}
		}
		if *asJSON {
			if verb == "show" {
				return writeJSON(g.stdout, qs[0])
			}
			return writeJSON(g.stdout, qs)
		}
		printQueues(g.stdout, qs)
	case "pause":
		if !*force {
			used, err := runtime.QueueInUse(ctx, pool, pos[1])
			if err != nil {
				return err
			}
			if !used {
				known, err := runtime.KnownQueues(ctx, pool)
				if err != nil {
					return err
				}
				return fmt.Errorf("queue %s is not in use: no worker has served it, no job is pending or running in it, and no recurring task enqueues into it (%s); add --force to pause it anyway",
					pos[1], knownList(known))
			}
		}
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

// knownList names the known queues for an error, at most ten.
func knownList(known []string) string {
	switch {
	case len(known) == 0:
		return "no queue is known yet"
	case len(known) > 10:
		return fmt.Sprintf("known queues: %s, and %d more", strings.Join(known[:10], ", "), len(known)-10)
	}
	return "known queues: " + strings.Join(known, ", ")
}

// printQueues prints one line per queue: whether it is paused, its counts
// by state, and how long its oldest runnable job has waited.
func printQueues(w io.Writer, qs []runtime.QueueInfo) {
	if len(qs) == 0 {
		fmt.Fprintln(w, "no queues yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tRUNNABLE\tSCHEDULED\tRUNNING\tWAITING\tDEAD\tOLDEST RUNNABLE")
	for _, q := range qs {
		paused, oldest := "no", "-"
		if q.Paused {
			paused = "yes, " + seconds(q.PausedSeconds) + " ago"
		}
		if q.Runnable > 0 {
			oldest = seconds(q.OldestRunnableSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Name, paused, q.Runnable, q.Scheduled, q.Running, q.Waiting, q.Dead, oldest)
	}
	tw.Flush()
}
