package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/fila-run/fila/internal/stats"
)

func init() {
	register("stats", "show queue depth, lag, dead jobs, run times and notification queue usage", runStats)
}

func runStats(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := stats.Collect(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	printStats(g.stdout, s)
	return nil
}

func printStats(w io.Writer, s *stats.Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "at %s\n\nJobs per queue and state\n", s.At.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintln(tw, "queue\tstate\tjobs\t")
	for _, q := range s.States {
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", q.Queue, q.State, q.Jobs)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nPending work")
	fmt.Fprintln(tw, "queue\trunnable\tscheduled\toldest runnable waited\t")
	for _, l := range s.Lag {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3fs\t\n", l.Queue, l.Runnable, l.Scheduled, l.OldestAgeSecond)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nDead jobs per kind")
	fmt.Fprintln(tw, "kind\tdead\tlast error\t")
	for _, d := range s.Dead {
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", d.Kind, d.Dead, oneLine(d.LastError, 70))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRun time of completed jobs, last hour")
	fmt.Fprintln(tw, "kind\tjobs\tp50 ms\tp95 ms\t")
	for _, k := range s.RunTimes {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t\n", k.Kind, k.Jobs, k.P50Ms, k.P95Ms)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nRunning past their lease (awaiting rescue): %d\n", s.ExpiredLeases)
	fmt.Fprintf(w, "Notification queue usage: %.4f%%\n", s.NotificationQueueUsage*100)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return truncateString(s, n)
}
