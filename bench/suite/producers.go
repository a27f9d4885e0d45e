package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// Producer variants: how workers learn of new jobs, which decides what a
// producer's COMMIT pays.
const (
	// ProducersNotifyAlways: the insert trigger's NOTIFY on every commit, as
	// when a program LISTENs for every queue (a '*' sleeper): one
	// instance-wide lock per commit.
	ProducersNotifyAlways = "notify-always"
	// ProducersNotify: a notify-mode worker running, as Fila runs by default:
	// producers notify only while it sleeps, and under load it polls.
	ProducersNotify    = "notify"
	ProducersNoTrigger = "no-trigger" // nothing: the bare commit
	ProducersWAL       = "wal"        // trigger off, a logical-replication worker running
)

// producerVariant is one column of the producers table.
type producerVariant struct {
	name    string
	trigger bool
	always  bool   // a '*' sleeper: the trigger notifies every commit
	worker  string // runtime mode of a worker running meanwhile, "" for none
}

// producerVariants are the variants this build can run; the WAL one needs
// the runtime's WAL mode.
func (s *suite) producerVariants() []producerVariant {
	vs := []producerVariant{
		{name: ProducersNotifyAlways, trigger: true, always: true},
		{name: ProducersNotify, trigger: true, worker: ModeNotify},
		{name: ProducersNoTrigger, trigger: false},
	}
	if slices.Contains(s.opts.Modes, ModeWAL) {
		if err := modeAvailable(ModeWAL); err != nil {
			s.res.note("producers: variant wal skipped: %v", err)
		} else {
			vs = append(vs, producerVariant{name: ProducersWAL, trigger: false, worker: ModeWAL})
		}
	}
	return vs
}

// producers measures what P concurrent producers commit per second, each
// committing one single-row INSERT per transaction, for each variant. In
// notify-always a sleeper row makes the trigger notify every commit, with
// nobody listening (the NOTIFY lock is taken at commit whether anyone listens
// or not); in notify a notify-mode worker runs, and producers notify only
// while it sleeps.
func (s *suite) producers(ctx context.Context) error {
	for _, v := range s.producerVariants() {
		for _, p := range s.opts.ProducerCounts {
			res, err := s.runProducers(ctx, v, p)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.res.note("producers %s ×%d: failed: %v", v.name, p, err)
				continue
			}
			s.res.Producers = append(s.res.Producers, res)
		}
	}
	return nil
}

func (s *suite) runProducers(ctx context.Context, v producerVariant, producers int) (res bench.ProducerResult, err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	pool, err := db.pool(ctx, producers)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if !v.trigger {
		if err := runtime.SetNotifyTrigger(ctx, pool, false); err != nil {
			return res, err
		}
	}
	if v.always {
		if _, err := pool.Exec(ctx, `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'bench-producers')`); err != nil {
			return res, fmt.Errorf("record a sleeper on every queue: %w", err)
		}
	}
	if v.worker != "" {
		cfg := runtimeConfig(v.worker, db.dsn, s.log, noop)
		cfg.Kinds[0].Name = producerKind
		rt, err := runtime.New(cfg)
		if err != nil {
			return res, err
		}
		stop, err := started(ctx, rt)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}

	prog := report.NewProgress(s.opts.Progress, fmt.Sprintf("producers %s ×%d", v.name, producers), 0)
	defer prog.Done()
	var (
		mu      sync.Mutex
		samples []float64
		errs    int
		wg      sync.WaitGroup
	)
	begin := time.Now()
	end := begin.Add(s.opts.ProducerDuration)
	for range producers {
		wg.Go(func() {
			var mine []float64
			var failed int
			// The last commits finish after end rather than being cut off.
			for ctx.Err() == nil && time.Now().Before(end) {
				ms, err := commitOne(ctx, pool)
				switch {
				case err == nil:
					mine = append(mine, ms)
					prog.Add(1)
				case ctx.Err() == nil:
					failed++
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			errs += failed
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if len(samples) == 0 {
		return res, fmt.Errorf("no commit succeeded (%d errors)", errs)
	}
	p50, _, p99, _, maxMs := report.Percentiles(samples)
	return bench.ProducerResult{
		System: SystemFila, Mode: v.name, Producers: producers, Commits: len(samples), Errors: errs,
		Seconds: elapsed.Seconds(), CommitsPerSec: float64(len(samples)) / elapsed.Seconds(),
		P50Ms: p50, P99Ms: p99, MaxMs: maxMs,
	}, nil
}

// commitOne inserts one row in a transaction of its own and returns how long
// its COMMIT took, in milliseconds.
func commitOne(ctx context.Context, pool *pgxpool.Pool) (float64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, producerInsertSQL); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	t0 := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return float64(time.Since(t0)) / float64(time.Millisecond), nil
}
