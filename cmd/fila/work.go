package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/runtime"
)

func init() {
	register("work", "run jobs until SIGTERM (Go built-ins, or any program via --exec KIND=COMMAND)", runWork)
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runWork(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	var queues, execs, timeouts multiFlag
	fs.Var(&queues, "queue", "queue to work (repeatable; default: default)")
	fs.Var(&execs, "exec", "KIND=COMMAND: run COMMAND with sh -c for each job of KIND; payload on stdin; exit 0 completes, "+fmt.Sprint(ExitPermanent)+" fails permanently, anything else retries (repeatable)")
	fs.Var(&timeouts, "timeout", "KIND=DURATION: cancel a job of KIND after this long (repeatable)")
	concurrency := fs.Int("concurrency", runtime.ConcurrencyDefault, "handlers running at once")
	mode := fs.String("mode", string(runtime.ModeNotify), "how workers learn of new jobs: notify, poll or wal")
	lease := fs.Duration("lease", runtime.LeaseDefault, "lease of a claimed job, kept alive by heartbeats; a crashed worker's job runs again after this")
	safety := fs.Duration("safety-poll", fallbackpoll.SafetyPollDefault, "safety poll interval while the wake source is healthy (1s to 10m)")
	pollMin := fs.Duration("poll-min", fallbackpoll.PollMinDefault, "poll mode: interval while work flows")
	pollMax := fs.Duration("poll-max", fallbackpoll.PollMaxDefault, "poll mode: idle backoff cap")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM, let running jobs finish for this long, then cancel them (a second signal cancels at once)")
	retention := fs.Duration("retention", runtime.RetentionDefault, "delete completed jobs older than this (negative: keep them)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	kinds, err := buildKinds(execs, timeouts)
	if err != nil {
		return err
	}
	listenDSN := g.listenerDSN()
	rt, err := runtime.New(runtime.Config{
		DSN: g.mainDSN(), ListenDSN: listenDSN, Queues: queues, Kinds: kinds,
		Concurrency: *concurrency, Mode: runtime.Mode(*mode), Lease: *lease,
		SafetyPoll: *safety, PollMin: *pollMin, PollMax: *pollMax,
		Retention: *retention, Logger: g.log(),
	})
	if err != nil {
		return err
	}

	// The first SIGTERM/SIGINT (ctx) stops claiming and drains; a second one,
	// or the shutdown timeout, cancels running handlers.
	hard := make(chan os.Signal, 2)
	signal.Notify(hard, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(hard)
	runCtx, hardStop := context.WithCancel(context.WithoutCancel(ctx))
	defer hardStop()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(runCtx) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	select { // consume the signal that cancelled ctx, so only a second one is "hard"
	case <-hard:
	case <-time.After(100 * time.Millisecond):
	}
	g.log().Info("stopping: finishing running jobs", zap.Duration("shutdown_timeout", *shutdown))
	stopCtx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	go func() {
		select {
		case <-hard:
			g.log().Warn("second signal: cancelling running jobs")
			cancel()
		case <-stopCtx.Done():
		}
	}()
	if err := rt.Stop(stopCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	return <-errc
}

// buildKinds turns the flags into handlers, with the built-in demo kinds.
func buildKinds(execs, timeouts multiFlag) ([]runtime.Kind, error) {
	byName := map[string]*runtime.Kind{}
	var order []string
	add := func(k runtime.Kind) {
		if _, ok := byName[k.Name]; !ok {
			order = append(order, k.Name)
		}
		kk := k
		byName[k.Name] = &kk
	}
	for _, k := range builtinKinds() {
		add(k)
	}
	for _, e := range execs {
		name, command, ok := strings.Cut(e, "=")
		name, command = strings.TrimSpace(name), strings.TrimSpace(command)
		if !ok || name == "" || command == "" {
			return nil, fmt.Errorf("--exec %q: want KIND=COMMAND", e)
		}
		add(runtime.Kind{Name: name, Handler: execHandler(command)})
	}
	for _, t := range timeouts {
		name, ds, ok := strings.Cut(t, "=")
		d, err := time.ParseDuration(strings.TrimSpace(ds))
		if !ok || err != nil || d <= 0 {
			return nil, fmt.Errorf("--timeout %q: want KIND=DURATION such as resize=30s", t)
		}
		k, found := byName[strings.TrimSpace(name)]
		if !found {
			return nil, fmt.Errorf("--timeout %q: no kind %q is handled (add --exec %s=COMMAND)", t, name, name)
		}
		k.Timeout = d
	}
	kinds := make([]runtime.Kind, 0, len(order))
	for _, n := range order {
		kinds = append(kinds, *byName[n])
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
