package suite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// The soak's producers: soakProducers goroutines, one connection each,
// commit what the schedule owes every soakTick, in transactions of up to
// soakMaxBatch jobs. A transaction per tick rather than per job: the soak
// measures the table and the tail over time at rates a single-job producer
// cannot commit with NOTIFY on.
const (
	soakProducers = 4
	soakTick      = 10 * time.Millisecond
	soakMaxBatch  = 1000
)

// soakTracker maps every job in flight to the time just before its
// producer's COMMIT, and files each pick-up's latency under the window its
// handler started in. Jobs leave the map when picked up, so it holds only
// what is in flight however long the soak runs.
type soakTracker struct {
	base   time.Time
	window time.Duration

	mu       sync.Mutex
	t0       map[int64]time.Time
	samples  map[int][]float64 // window index → latencies, ms
	inserted atomic.Int64
}

func newSoakTracker(window time.Duration) *soakTracker {
	return &soakTracker{t0: map[int64]time.Time{}, samples: map[int][]float64{}, window: window}
}

// start sets the time windows are counted from.
func (t *soakTracker) start(at time.Time) {
	t.mu.Lock()
	t.base = at
	t.mu.Unlock()
}

// committing records ids as committed at t0, before the COMMIT that makes
// them visible.
func (t *soakTracker) committing(ids []int64, t0 time.Time) {
	t.mu.Lock()
	for _, id := range ids {
		t.t0[id] = t0
	}
	t.mu.Unlock()
}

// forget drops ids whose COMMIT failed.
func (t *soakTracker) forget(ids []int64) {
	t.mu.Lock()
	for _, id := range ids {
		delete(t.t0, id)
	}
	t.mu.Unlock()
}

// handle is the soak's handler: it files the job's pickup latency.
func (t *soakTracker) handle(_ context.Context, job *runtime.Job) error {
	t1 := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t0, ok := t.t0[job.ID]
	if !ok {
		return nil
	}
	delete(t.t0, job.ID)
	w := int(t1.Sub(t.base) / t.window)
	t.samples[w] = append(t.samples[w], float64(t1.Sub(t0))/float64(time.Millisecond))
	return nil
}

// take removes and returns window w's latencies.
func (t *soakTracker) take(w int) []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.samples[w]
	delete(t.samples, w)
	return s
}

// inFlight is how many committed jobs have not been picked up.
func (t *soakTracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.t0)
}

// tableStats is what the database says about the jobs table.
type tableStats struct {
	total, indexes, live, dead, deleted int64
}

func readTableStats(ctx context.Context, pool *pgxpool.Pool) (tableStats, error) {
	var st tableStats
	err := pool.QueryRow(ctx, tableStatsSQL).Scan(&st.total, &st.indexes, &st.live, &st.dead, &st.deleted)
	if err != nil {
		return st, fmt.Errorf("read the table's size: %w", err)
	}
	return st, nil
}

// soak runs producers at SoakRate for SoakDuration against one notify-mode
// runtime sized as in the drain (Workers, ClaimBatch) with SoakRetention,
// and reports each SoakWindow: pickup p50/p99,
// the rates of insertion, completion and deletion, and the table's size.
func (s *suite) soak(ctx context.Context) (err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	tr := newSoakTracker(s.opts.SoakWindow)
	// Sized as the throughput scenarios are: the runtime's default
	// Concurrency of 20 is for handlers that do work, not for thousands of
	// no-op jobs a second.
	cfg := s.throughputConfig(db.dsn)
	cfg.Kinds[0].Handler = tr.handle
	cfg.Retention = s.opts.SoakRetention
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	stop, err := started(ctx, rt)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	prodPool, err := db.producerPool(ctx, soakProducers)
	if err != nil {
		return err
	}
	defer prodPool.Close()
	statsPool, err := db.pool(ctx, 1)
	if err != nil {
		return err
	}
	defer statsPool.Close()
	last, err := readTableStats(ctx, statsPool)
	if err != nil {
		return err
	}

	rate, window, duration := s.opts.SoakRate, s.opts.SoakWindow, s.opts.SoakDuration
	prog := report.NewProgress(s.opts.Progress, fmt.Sprintf("soak %d/s", rate), int(float64(rate)*duration.Seconds()))
	defer prog.Done()
	res := &bench.SoakResult{System: SystemFila, Mode: ModeNotify, RatePerSec: rate, Seconds: duration.Seconds(),
		WindowSec: window.Seconds(), RetentionSec: s.opts.SoakRetention.Seconds(), Config: s.configNote()}
	begin := time.Now()
	tr.start(begin)
	pctx, stopProducers := context.WithDeadline(ctx, begin.Add(duration))
	prodErr := make(chan error, 1)
	go func() { prodErr <- soakProduce(pctx, prodPool, tr, rate, prog) }()
	// On every path the producers stop and are waited for before their
	// pool closes.
	producersDone := sync.OnceValue(func() error { stopProducers(); return <-prodErr })
	defer producersDone()

	lastCompleted, lastInserted := rt.Stats().Completed, int64(0)
	windows := int(duration / window)
	for w := range windows {
		if err := sleepCtx(ctx, time.Until(begin.Add(time.Duration(w+1)*window))); err != nil {
			return err
		}
		st, err := readTableStats(ctx, statsPool)
		if err != nil {
			return err
		}
		completed, inserted := rt.Stats().Completed, tr.inserted.Load()
		secs := window.Seconds()
		row := bench.SoakWindow{
			EndSec:          float64(w+1) * secs,
			InsertedPerSec:  float64(inserted-lastInserted) / secs,
			CompletedPerSec: float64(completed-lastCompleted) / secs,
			DeletedPerSec:   float64(st.deleted-last.deleted) / secs,
			TableBytes:      st.total, IndexBytes: st.indexes, LiveRows: st.live, DeadRows: st.dead,
		}
		samples := tr.take(w)
		row.PickedUp = len(samples)
		row.P50Ms, _, row.P99Ms, _, _ = report.Percentiles(samples)
		res.Windows = append(res.Windows, row)
		last, lastCompleted, lastInserted = st, completed, inserted
	}
	if err := producersDone(); err != nil {
		return err
	}
	res.Inserted = int(tr.inserted.Load())
	deadline := time.Now().Add(lostAfter)
	for tr.inFlight() > 0 && time.Now().Before(deadline) {
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	res.Lost = tr.inFlight()
	s.res.Soak = res
	return nil
}

// soakProduce inserts rate jobs a second until ctx ends, open loop: every
// soakTick the schedule owes the jobs due by then, handed to the producers
// in batches; producers that fall behind make later batches bigger rather
// than lower the rate asked for.
func soakProduce(ctx context.Context, pool *pgxpool.Pool, tr *soakTracker, rate int, prog *report.Progress) error {
	batches := make(chan int, 64)
	go func() {
		defer close(batches)
		start := time.Now()
		tick := time.NewTicker(soakTick)
		defer tick.Stop()
		released, owed := 0, 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			due := int(float64(rate) * time.Since(start).Seconds())
			owed, released = owed+due-released, due
		send:
			for owed > 0 {
				k := min(owed, soakMaxBatch)
				select {
				case batches <- k:
					owed -= k
				default:
					break send // every producer is busy: carry it to the next tick
				}
			}
		}
	}()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range soakProducers {
		wg.Go(func() {
			params := make([]runtime.InsertParams, soakMaxBatch)
			for i := range params {
				params[i] = runtime.InsertParams{Kind: benchKind}
			}
			for k := range batches {
				if ctx.Err() != nil {
					continue // drain, so the scheduler can finish
				}
				if err := soakCommit(ctx, pool, tr, params[:k]); err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
					}
					continue
				}
				prog.Add(k)
			}
		})
	}
	wg.Wait()
	return firstErr
}

// soakCommit inserts jobs in one transaction, recording their commit time
// just before COMMIT.
func soakCommit(ctx context.Context, pool *pgxpool.Pool, tr *soakTracker, jobs []runtime.InsertParams) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	ids, err := runtime.InsertMany(ctx, tx, jobs)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	tr.committing(ids, time.Now())
	if err := tx.Commit(ctx); err != nil {
		tr.forget(ids)
		return fmt.Errorf("commit: %w", err)
	}
	tr.inserted.Add(int64(len(ids)))
	return nil
}
