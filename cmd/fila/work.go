package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

func init() {
	register("work", "run jobs until SIGTERM (Go built-ins, or any program via --exec KIND=COMMAND)", runWork)
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// workFlags are work's own flags. On the command line a value is what it
// says: every default is spelled out in -h, and zero is never a stand-in
// for it (runtime.Config's "zero means default" is for Go callers).
type workFlags struct {
	queues, execs, timeouts multiFlag
	concurrency             int
	mode                    string
	lease, safety           time.Duration
	pollMin, pollMax        time.Duration
	shutdown, retention     time.Duration
}

func (f *workFlags) add(fs *flag.FlagSet) {
	fs.Var(&f.queues, "queue", "queue to work (repeatable; default: default)")
	fs.Var(&f.execs, "exec", "KIND=COMMAND: run COMMAND with sh -c for each job of KIND; payload on stdin, its stdout goes to this worker's stdout, the tail of its stderr becomes the job's error; exit 0 completes, "+fmt.Sprint(ExitPermanent)+" fails permanently, anything else retries (repeatable, one per kind)")
	fs.Var(&f.timeouts, "timeout", "KIND=DURATION: cancel a job of KIND after this long (repeatable, one per kind)")
	fs.IntVar(&f.concurrency, "concurrency", runtime.ConcurrencyDefault, fmt.Sprintf("handlers running at once, 1 to %d", runtime.ConcurrencyMax))
	fs.StringVar(&f.mode, "mode", string(runtime.ModeNotify), "how workers learn of new jobs: notify, poll or wal")
	fs.DurationVar(&f.lease, "lease", runtime.LeaseDefault, fmt.Sprintf("lease of a claimed job, kept alive by heartbeats; a crashed worker's job runs again after this (%s to %s)", runtime.LeaseMin, runtime.LeaseMax))
	fs.DurationVar(&f.safety, "safety-poll", runtime.SafetyPollDefault, fmt.Sprintf("safety poll interval while the wake source is healthy (%s to %s)", runtime.SafetyPollMin, runtime.SafetyPollMax))
	fs.DurationVar(&f.pollMin, "poll-min", runtime.PollMinDefault, "poll mode: interval while work flows (above 0)")
	fs.DurationVar(&f.pollMax, "poll-max", runtime.PollMaxDefault, "poll mode: idle backoff cap (at least --poll-min)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM, let running jobs finish for this long, then cancel them; 0 cancels them at once (a second signal also does)")
	fs.DurationVar(&f.retention, "retention", runtime.RetentionDefault, "delete completed jobs older than this; negative keeps them")
}

// check refuses values out of range with the flag's name, before
// runtime.Config could read a zero as its default or adjust one quietly.
func (f *workFlags) check() error {
	seen := map[string]bool{}
	for _, q := range f.queues {
		if err := channel.ValidateQueue(q); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
		if seen[q] {
			return fmt.Errorf("--queue %s is given twice", q)
		}
		seen[q] = true
	}
	switch runtime.Mode(f.mode) {
	case runtime.ModeNotify, runtime.ModePoll, runtime.ModeWAL:
	default:
		return fmt.Errorf("--mode %q is unknown: use notify, poll or wal", f.mode)
	}
	switch {
	case f.concurrency < 1 || f.concurrency > runtime.ConcurrencyMax:
		return fmt.Errorf("--concurrency %d out of range: allowed 1 to %d", f.concurrency, runtime.ConcurrencyMax)
	case f.lease < runtime.LeaseMin || f.lease > runtime.LeaseMax:
		return fmt.Errorf("--lease %s out of range: allowed %s to %s", f.lease, runtime.LeaseMin, runtime.LeaseMax)
	case f.safety < runtime.SafetyPollMin || f.safety > runtime.SafetyPollMax:
		return fmt.Errorf("--safety-poll %s out of range: allowed %s to %s", f.safety, runtime.SafetyPollMin, runtime.SafetyPollMax)
	case f.pollMin <= 0:
		return fmt.Errorf("--poll-min %s: must be above 0", f.pollMin)
	case f.pollMax < f.pollMin:
		return fmt.Errorf("--poll-max %s is below --poll-min %s", f.pollMax, f.pollMin)
	case f.shutdown < 0:
		return fmt.Errorf("--shutdown-timeout %s is negative: 0 cancels running jobs at once", f.shutdown)
	case f.retention == 0:
		return errors.New("--retention 0: give how long to keep completed jobs, or a negative duration to keep them")
	}
	return nil
}

func runWork(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	var f workFlags
	f.add(fs)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	kinds, err := buildKinds(f.execs, f.timeouts, g.stdout)
	if err != nil {
		return err
	}
	rt, err := runtime.New(runtime.Config{
		DSN: g.mainDSN(), ListenDSN: g.listenerDSN(), Queues: f.queues, Kinds: kinds,
		Concurrency: f.concurrency, Mode: runtime.Mode(f.mode), Lease: f.lease,
		SafetyPoll: f.safety, PollMin: f.pollMin, PollMax: f.pollMax,
		Retention: f.retention, Logger: g.log(),
	})
	if err != nil {
		return err
	}

	// The first SIGTERM/SIGINT (ctx) stops claiming and drains; a second
	// one, or the shutdown timeout, cancels running handlers. A second
	// signal cancels the runtime's own context, its hard stop, rather than
	// Stop's deadline: nothing passed a deadline.
	runCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.log().Info("stopping: finishing running jobs", zap.Duration("shutdown_timeout", f.shutdown))
	stopCtx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	go func() {
		select {
		case <-g.laterSignals:
			g.log().Warn("second signal: cancelling running jobs")
			hardStop()
		case <-stopCtx.Done():
		}
	}()
	if err := rt.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return <-errc
}

// buildKinds turns the flags into handlers, beside the built-in demo kinds.
// A kind given twice, or a built-in given again, is refused: the runtime's
// Go API refuses duplicates too, and "the last one wins" hides a typo.
func buildKinds(execs, timeouts multiFlag, stdout io.Writer) ([]runtime.Kind, error) {
	kinds := builtinKinds()
	index := map[string]int{}
	for i, k := range kinds {
		index[k.Name] = i
	}
	for _, e := range execs {
		name, command, ok := strings.Cut(e, "=")
		if !ok || strings.TrimSpace(command) == "" {
			return nil, fmt.Errorf("--exec %q: want KIND=COMMAND", e)
		}
		if err := runtime.ValidateKind(name); err != nil {
			return nil, fmt.Errorf("--exec %q: %w", e, err)
		}
		if i, dup := index[name]; dup {
			if i < len(builtinKindNames()) {
				return nil, fmt.Errorf("--exec %q: %s is a built-in kind; choose another name", e, name)
			}
			return nil, fmt.Errorf("--exec: kind %s is given twice", name)
		}
		index[name] = len(kinds)
		kinds = append(kinds, runtime.Kind{Name: name, Handler: execHandler(command, stdout)})
	}
	timed := map[string]bool{}
	for _, t := range timeouts {
		name, ds, ok := strings.Cut(t, "=")
		d, err := time.ParseDuration(strings.TrimSpace(ds))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("--timeout %q: want KIND=DURATION such as resize=30s", t)
		}
		i, found := index[name]
		if !found {
			return nil, fmt.Errorf("--timeout %q: no kind %q is handled (add --exec %s=COMMAND)", t, name, name)
		}
		if timed[name] {
			return nil, fmt.Errorf("--timeout: kind %s is given twice", name)
		}
		timed[name] = true
		kinds[i].Timeout = d
	}
	return kinds, nil
}

// builtinKinds are handlers for demos and benchmarks: noop completes at
// once; sleep waits payload.ms milliseconds (or until cancelled).
func builtinKinds() []runtime.Kind {
	return []runtime.Kind{
		{Name: "noop", Handler: func(context.Context, *runtime.Job) error { return nil }},
		{Name: "sleep", Handler: func(ctx context.Context, job *runtime.Job) error {
			var p struct {
				MS int `json:"ms"`
			}
			if err := job.Decode(&p); err != nil {
				return err
			}
			select {
			case <-time.After(time.Duration(p.MS) * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}},
	}
}

// builtinKindNames are the names of builtinKinds, which every worker runs
// and enqueue always accepts.
func builtinKindNames() []string {
	var names []string
	for _, k := range builtinKinds() {
		names = append(names, k.Name)
	}
	return names
}
