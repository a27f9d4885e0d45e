package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fila-run/fila/internal/duration"
	"github.com/fila-run/fila/internal/stats"
)

func init() {
	register("stats", "show queue depth, lag, dead jobs, recent run times, workers and notification queue usage; --check for alerts", runStats)
}

// errBreached makes `fila stats --check` exit with status 1 once the breached
// thresholds are printed.
var errBreached = errors.New("check failed")

func runStats(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (lists are [] when empty)")
	check := fs.Bool("check", false, "compare with the --max-* thresholds: print one line per breached threshold and exit 1, or one line starting with \"ok:\" and exit 0")
	maxDead := fs.Int64("max-dead", 0, "with --check: most dead jobs (all kinds together) still fine")
	maxOldest := new(time.Duration)
	durationVar(fs, maxOldest, "max-oldest", 0, "with --check: longest the oldest runnable job of any queue may have waited, e.g. 60s; paused queues are left out (see --max-paused)")
	maxNotify := fs.Float64("max-notify-queue", 0, "with --check: highest notification queue usage still fine, from 0 to 1")
	maxUnhandled := fs.Int64("max-unhandled", 0, "with --check: most pending jobs still fine that no live worker of their queue handles (all kinds together), e.g. 0")
	maxOrphaned := fs.Int64("max-orphaned-tasks", 0, "with --check: most recurring tasks still fine that no live worker schedules, e.g. 0")
	maxPaused := new(time.Duration)
	durationVar(fs, maxPaused, "max-paused", 0, "with --check: longest any queue may have been paused, e.g. 1h")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	var th stats.Thresholds
	var badFlag string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-dead":
			th.MaxDead = maxDead
			if *maxDead < 0 {
				badFlag = fmt.Sprintf("--max-dead %d is negative", *maxDead)
			}
		case "max-oldest":
			th.MaxOldest = maxOldest
			if *maxOldest < 0 {
				badFlag = fmt.Sprintf("--max-oldest %s is negative", *maxOldest)
			}
		case "max-notify-queue":
			th.MaxNotifyQueue = maxNotify
			if *maxNotify < 0 || *maxNotify > 1 {
				badFlag = fmt.Sprintf("--max-notify-queue %g is out of range: a share of the queue, from 0 to 1", *maxNotify)
			}
		case "max-unhandled":
			th.MaxUnhandled = maxUnhandled
			if *maxUnhandled < 0 {
				badFlag = fmt.Sprintf("--max-unhandled %d is negative", *maxUnhandled)
			}
		case "max-orphaned-tasks":
			th.MaxOrphanedTasks = maxOrphaned
			if *maxOrphaned < 0 {
				badFlag = fmt.Sprintf("--max-orphaned-tasks %d is negative", *maxOrphaned)
			}
		case "max-paused":
			th.MaxPaused = maxPaused
			if *maxPaused < 0 {
				badFlag = fmt.Sprintf("--max-paused %s is negative", *maxPaused)
			}
		}
	})
	switch {
	case badFlag != "":
	case *check && th.Empty():
		badFlag = "--check needs at least one of --max-dead, --max-oldest, --max-notify-queue, --max-unhandled, --max-orphaned-tasks, --max-paused"
	case !*check && !th.Empty():
		badFlag = "the --max-* thresholds apply only with --check"
	}
	if badFlag != "" {
		return g.usageError("%s", badFlag)
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

	var breaches []string
	var summary string
	if *check {
		breaches, summary = s.Check(th)
	}
	switch {
	case *asJSON && *check:
		err = writeJSON(g.stdout, struct {
			*stats.Snapshot
			Check checkResult `json:"check"`
		}{s, checkResult{Breaches: breaches, Summary: summary}})
	case *asJSON:
		err = writeJSON(g.stdout, s)
	case *check:
		for _, b := range breaches {
			fmt.Fprintln(g.stdout, b)
		}
		if len(breaches) == 0 {
			fmt.Fprintf(g.stdout, "ok: %s\n", summary)
		}
	default:
		printStats(g.stdout, s)
	}
	if err != nil {
		return err
	}
	if len(breaches) > 0 {
		return fmt.Errorf("%w: %d threshold(s) breached", errBreached, len(breaches))
	}
	return nil
}

// checkResult is what --check adds to --json.
type checkResult struct {
	Breaches []string `json:"breaches"`
	Summary  string   `json:"summary"`
}

func printStats(w io.Writer, s *stats.Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "at %s (database clock)\n", s.At.Format("2006-01-02 15:04:05 MST"))
	if len(s.Warnings) > 0 {
		fmt.Fprintln(w, "\nWarnings")
		for _, m := range s.Warnings {
			fmt.Fprintf(w, "  ! %s\n", termLine(oneLine(m, 400)))
		}
	}

	fmt.Fprintln(w, "\nQueues")
	paused := s.Paused()
	if len(s.Queues) == len(paused) {
		fmt.Fprintln(w, "  (no pending or running jobs outside paused queues)")
	} else {
		fmt.Fprintln(tw, "queue\trunnable\tscheduled\toldest runnable waited\trunning\tpast lease\twaiting\tblocked\t")
		for _, q := range s.Queues {
			if !q.Paused {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t\n", termLine(q.Queue), q.Runnable, q.Scheduled,
					seconds(q.OldestRunnableSeconds), q.Running, q.ExpiredLeases, q.Waiting, q.Blocked)
			}
		}
		tw.Flush()
	}
	if len(s.Blocked) > 0 {
		fmt.Fprintln(w, "\nBlocked sequences (the job before the next one is dead: retry or delete it to go on)")
		for _, b := range s.Blocked {
			fmt.Fprintf(w, "  sequence %s: job %d waits behind dead job %d (queue %s)\n", termLine(b.Sequence), b.NextJob, b.DeadJob, termLine(b.Queue))
		}
	}
	if len(paused) > 0 {
		fmt.Fprintln(w, "\nPaused queues (their pending jobs wait on purpose; --check --max-oldest leaves them out)")
		fmt.Fprintln(tw, "queue\tpaused for\trunnable\tscheduled\toldest runnable waited\trunning\t")
		for _, q := range paused {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t\n", termLine(q.Queue), seconds(math.Round(q.PausedSeconds)), q.Runnable, q.Scheduled,
				seconds(q.OldestRunnableSeconds), q.Running)
		}
		tw.Flush()
		for _, q := range paused {
			fmt.Fprintf(w, "  queue %s: its pending jobs wait until `fila queue resume %s`\n", termLine(q.Queue), termLine(q.Queue))
		}
	}

	if s.Completed.Estimate {
		fmt.Fprintf(w, "\nCompleted jobs held: ≈ %d (estimate from table statistics: an exact count would read the whole history)\n", s.Completed.Jobs)
	} else {
		fmt.Fprintf(w, "\nCompleted jobs held: %d\n", s.Completed.Jobs)
	}

	r := s.Recent
	window := fmt.Sprintf("the newest %d completions or those of the last %s, whichever is fewer", r.MaxJobs, seconds(r.MaxAgeSeconds))
	if r.LimitedByJobs {
		fmt.Fprintf(w, "\nRecent completions: the newest %d, over the last %s: %s/s (window: %s)\n", r.Jobs, seconds(r.SpanSeconds), rate(r.PerSecond), window)
	} else {
		fmt.Fprintf(w, "\nRecent completions: %d in the last %s: %s/s (window: %s)\n", r.Jobs, seconds(r.SpanSeconds), rate(r.PerSecond), window)
	}
	if len(r.Kinds) > 0 {
		fmt.Fprintln(tw, "kind\tjobs\tper s\twith start time\tp50 ms\tp95 ms\t")
		for _, k := range r.Kinds {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t\n", termLine(oneLine(k.Kind, 60)), k.Jobs, rate(k.PerSecond), k.Timed, millis(k.P50Ms), millis(k.P95Ms))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nDead jobs per kind")
	if len(s.Dead) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else {
		fmt.Fprintln(tw, "kind\tdead\tlast died\tlast error\t")
		for _, d := range s.Dead {
			last, lastErr := "-", "(none)"
			if d.LastAt != nil {
				last = seconds(s.At.Sub(*d.LastAt).Seconds()) + " ago"
			}
			if d.LastError != "" {
				lastErr = termLine(oneLine(d.LastError, 70))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", termLine(oneLine(d.Kind, 60)), d.Dead, last, lastErr)
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nCancelled jobs held: %d\n", s.Cancelled)

	fmt.Fprintf(w, "\nWorkers: %d live", len(s.Workers))
	if s.GoneWorkers > 0 {
		fmt.Fprintf(w, ", %d gone (missed %d refreshes of their row: killed, frozen or cut off)", s.GoneWorkers, stats.LivenessMissed)
	}
	fmt.Fprintln(w)
	if len(s.Workers) > 0 {
		fmt.Fprintln(tw, "id\thost\tpid\tmode\twake source\tqueues\tlast seen\t")
		for _, wk := range s.Workers {
			seen := seconds(wk.LastSeenSeconds) + " ago"
			wake := oneLine(wk.WakeSource, 20)
			if wk.WakeError != "" {
				wake += ": " + oneLine(wk.WakeError, 60)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", termLine(oneLine(wk.ID, 40)), termLine(oneLine(wk.Host, 40)), wk.PID,
				termLine(oneLine(wk.Mode, 20)), termLine(wake), termLine(oneLine(strings.Join(wk.Queues, ","), 40)), seen)
		}
		tw.Flush()
	}

	trigger := "on"
	if !s.NotifyTrigger {
		trigger = "off (workers must run --mode wal or poll)"
	}
	fmt.Fprintf(w, "\nNotify trigger: %s\n", trigger)
	fmt.Fprintf(w, "Notification queue usage: %.4f%%\n", s.NotificationQueueUsage*100)
}

// seconds shows a span of seconds as every duration of the command line
// is shown (duration.Format).
func seconds(s float64) string {
	return duration.Format(time.Duration(s * float64(time.Second)))
}

// rate shows jobs per second: hundredths while few, whole jobs past ten.
func rate(perSecond float64) string {
	if perSecond < 10 {
		return fmt.Sprintf("%.2f", perSecond)
	}
	return fmt.Sprintf("%.0f", perSecond)
}

func millis(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *ms)
}

// oneLine folds whitespace, newlines and tabs included, so that text written
// by hand cannot break a table's row, and keeps at most n characters (not
// bytes: a kind or an error may be in any language).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
