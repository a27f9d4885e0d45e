package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// pollIntervals are the pure-poll modes' intervals.
var pollIntervals = map[string]time.Duration{
	ModePoll50:  50 * time.Millisecond,
	ModePoll200: 200 * time.Millisecond,
	ModePoll1s:  time.Second,
}

// runtimeConfig is the runtime of one mode on dsn with everything else at its
// defaults, as a user who picked only the mode would run it.
func runtimeConfig(mode, dsn string, log *zap.Logger, h runtime.Handler) runtime.Config {
	cfg := runtime.Config{DSN: dsn, Logger: log, Kinds: []runtime.Kind{{Name: benchKind, Handler: h}}}
	switch mode {
	case ModeNotify:
		cfg.Mode = runtime.ModeNotify
	case ModeWAL:
		cfg.Mode = runtime.ModeWAL
	default:
		iv := pollIntervals[mode]
		cfg.Mode = runtime.ModePoll
		cfg.PollMin, cfg.PollMax = iv, iv
	}
	return cfg
}

// modeAvailable reports whether this build's runtime accepts mode; the WAL
// mode is being added separately and refused by builds without it.
func modeAvailable(mode string) error {
	cfg := runtimeConfig(mode, "postgres://localhost/x", nil, func(context.Context, *runtime.Job) error { return nil })
	if _, err := runtime.New(cfg); err != nil {
		return err
	}
	return nil
}

// availableModes returns the requested modes this build can run, noting
// the others.
func (s *suite) availableModes(scenario string) []string {
	var out []string
	for _, m := range s.opts.Modes {
		if err := modeAvailable(m); err != nil {
			s.res.note("%s: mode %s skipped: %v", scenario, m, err)
			continue
		}
		out = append(out, m)
	}
	return out
}

// started runs rt until the returned stop is called, once it is ready.
func started(ctx context.Context, rt *runtime.Runtime) (stop func() error, err error) {
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(ctx) }()
	stop = func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		return errors.Join(rt.Stop(sctx), <-errc)
	}
	select {
	case <-rt.Ready():
		return stop, nil
	case err := <-errc:
		return nil, fmt.Errorf("runtime: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.Join(errors.New("runtime not ready after 30s"), stop())
	}
}

// latency runs the pickup-latency scenario (and the floor, when selected),
// rate by rate, so the floor, the modes it bounds and the peers (when they
// run) are measured close together.
func (s *suite) latency(ctx context.Context) error {
	var modes []string
	if s.opts.has(ScenarioLatency) {
		modes = s.availableModes(ScenarioLatency)
	}
	type run struct {
		name string
		fn   func(context.Context, int) (bench.LatencyResult, error)
	}
	var runs []run
	if s.opts.has(ScenarioFloor) {
		for _, m := range []string{FloorListen, FloorListenClaim} {
			runs = append(runs, run{SystemFloor + "/" + m, func(ctx context.Context, rate int) (bench.LatencyResult, error) { return s.runFloor(ctx, m, rate) }})
		}
	}
	for _, m := range modes {
		runs = append(runs, run{"fila/" + m, func(ctx context.Context, rate int) (bench.LatencyResult, error) { return s.runFila(ctx, m, rate) }})
	}
	for _, rate := range s.opts.Rates {
		for _, r := range runs {
			res, err := r.fn(ctx, rate)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.res.note("latency %s at %d/s: failed: %v", r.name, rate, err)
				continue
			}
			s.res.Latency = append(s.res.Latency, res)
		}
		if s.opts.has(ScenarioLatency) {
			// The peers at this rate now, beside Fila's rows of it.
			if err := s.runPeers(ctx, ScenarioLatency, rate); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.res.note("peers: latency at %d/s: failed: %v", rate, err)
			}
		}
	}
	return nil
}

// jobsFor is how many jobs a run at rate inserts: Duration's worth, and
// at least MinSamples.
func (s *suite) jobsFor(rate int) int {
	return max(int(int64(rate)*int64(s.opts.Duration)/int64(time.Second)), s.opts.MinSamples, 1)
}

// runFila measures one runtime mode at one rate in a fresh database.
func (s *suite) runFila(ctx context.Context, mode string, rate int) (res bench.LatencyResult, err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	if mode == ModeWAL {
		// WAL-mode workers need no NOTIFY, and docs/wake-sources.md says to switch the
		// trigger off with them: producers' commits then take no
		// instance-wide lock.
		if err := db.setNotifyTrigger(ctx, false); err != nil {
			return res, err
		}
	}
	return s.runFilaOn(ctx, db, mode, rate, ScenarioLatency)
}

// runFilaOn measures one runtime mode at one rate in db, with a runtime of
// its own started for the run; label names the run in the progress line.
func (s *suite) runFilaOn(ctx context.Context, db *database, mode string, rate int, label string) (res bench.LatencyResult, err error) {
	rec := newRecorder(s.jobsFor(rate))
	cfg := runtimeConfig(mode, db.dsn, s.log, func(_ context.Context, job *runtime.Job) error {
		rec.pickedUp(job.ID, time.Now())
		return nil
	})
	rt, err := runtime.New(cfg)
	if err != nil {
		return res, err
	}
	stop, err := started(ctx, rt)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	return s.measure(ctx, db, rec, SystemFila, mode, rate, label)
}

// measure warms the path up, produces at rate, waits for pick-ups and
// returns the result; label names the run in the progress line.
func (s *suite) measure(ctx context.Context, db *database, rec *recorder, system, mode string, rate int, label string) (bench.LatencyResult, error) {
	var res bench.LatencyResult
	producers := producersFor(rate)
	pool, err := db.producerPool(ctx, producers)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := rec.warmUp(ctx, pool, lostAfter+2*time.Second); err != nil {
		return res, err
	}
	prog := report.NewProgress(s.opts.Progress, fmt.Sprintf("%s %s %s %d/s", label, system, mode, rate), len(rec.t0))
	lag, err := rec.produce(ctx, pool, rate, producers, prog)
	prog.Done()
	if err != nil {
		return res, err
	}
	if lag > s.opts.Duration/10+50*time.Millisecond {
		s.res.note("%s %s %s at %d/s: the producers fell %s behind schedule: they reached %.0f/s",
			label, system, mode, rate, lag.Round(time.Millisecond), rec.achieved)
	}
	if err := rec.waitPickedUp(ctx); err != nil {
		return res, err
	}
	return rec.result(system, mode, rate), nil
}

// latencyOf returns the result of system/mode at rate, if measured.
func latencyOf(rs []bench.LatencyResult, system, mode string, rate int) (bench.LatencyResult, bool) {
	i := slices.IndexFunc(rs, func(r bench.LatencyResult) bool {
		return r.System == system && r.Mode == mode && r.RatePerSec == rate
	})
	if i < 0 {
		return bench.LatencyResult{}, false
	}
	return rs[i], true
}
