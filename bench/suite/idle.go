package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/fallbackpoll"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ),
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// baselineRun is how long the baseline worker of each mode runs after it is
// ready: long enough for its start-up claims, far shorter than any poll.
const baselineRun = 500 * time.Millisecond

// idleWorker is one idle runtime in a database of its own.
type idleWorker struct {
	db   *database
	stop func() error
}

func (w *idleWorker) close() error {
	var err error
	if w.stop != nil {
		err = w.stop()
		w.stop = nil
	}
	return errors.Join(err, w.db.drop())
}

// idle measures what an idle worker of each mode costs its database. The
// server publishes a backend's transaction counters lazily (at most once a
// second, and up to ten seconds late for a backend that goes idle) but
// always when the backend exits. So each mode runs two workers in databases
// of their own: one for the window, and a baseline that is stopped as soon
// as it has started; once both have exited, the difference of their
// databases' counters is what the window cost, start-up excluded. Every
// mode runs at once. Backend CPU is read from /proc over the window.
func (s *suite) idle(ctx context.Context) (err error) {
	modes := s.availableModes(ScenarioIdle)
	var workers []*idleWorker
	defer func() {
		for _, w := range workers {
			err = errors.Join(err, w.close())
		}
	}()
	start := func(mode string) (*idleWorker, error) {
		db, err := s.srv.fresh(ctx)
		if err != nil {
			return nil, err
		}
		w := &idleWorker{db: db}
		workers = append(workers, w)
		rt, err := runtime.New(runtimeConfig(mode, db.dsn, s.log, noop))
		if err != nil {
			return nil, err
		}
		if w.stop, err = started(ctx, rt); err != nil {
			return nil, fmt.Errorf("idle %s: %w", mode, err)
		}
		return w, nil
	}
	measured := make([]*idleWorker, len(modes))
	baseline := make([]*idleWorker, len(modes))
	for i, m := range modes {
		if baseline[i], err = start(m); err != nil {
			return err
		}
		if measured[i], err = start(m); err != nil {
			return err
		}
	}
	begin := time.Now()
	window := s.opts.IdleDuration
	prog := report.NewProgress(s.opts.Progress, "idle", int(window.Seconds()))
	defer prog.Done()
	if err := sleepCtx(ctx, baselineRun); err != nil {
		return err
	}
	if err := stopAll(baseline); err != nil {
		return fmt.Errorf("stop baseline workers: %w", err)
	}
	cpu0 := make([]map[int]float64, len(modes))
	for i, w := range measured {
		cpu0[i] = s.backendCPU(ctx, w.db.name)
	}
	for time.Since(begin) < window {
		if err := sleepCtx(ctx, min(time.Second, window-time.Since(begin))); err != nil {
			return err
		}
		prog.Set(int(time.Since(begin).Seconds()))
	}
	cpu1 := make([]map[int]float64, len(modes))
	for i, w := range measured {
		cpu1[i] = s.backendCPU(ctx, w.db.name)
	}
	elapsed := time.Since(begin)
	if err := stopAll(measured); err != nil {
		return fmt.Errorf("stop workers: %w", err)
	}
	for i, m := range modes {
		txM, err := s.exitedTransactions(ctx, measured[i].db.name)
		if err != nil {
			return err
		}
		txB, err := s.exitedTransactions(ctx, baseline[i].db.name)
		if err != nil {
			return err
		}
		r := bench.IdleResult{
			System: SystemFila, Mode: m, Seconds: elapsed.Seconds(),
			Transactions: txM - txB, TxPerSec: float64(txM-txB) / elapsed.Seconds(),
			Backends: len(cpu1[i]), CPUMs: cpuDelta(cpu0[i], cpu1[i]),
		}
		switch m {
		case ModeNotify:
			r.SafetyPollSec = fallbackpoll.SafetyPollDefault.Seconds()
			r.PingSec = listener.PingIntervalDefault.Seconds()
		case ModeWAL:
			r.SafetyPollSec = fallbackpoll.SafetyPollDefault.Seconds()
		default:
			r.SafetyPollSec = pollIntervals[m].Seconds()
		}
		s.res.Idle = append(s.res.Idle, r)
	}
	return nil
}

// stopAll stops the workers at once.
func stopAll(ws []*idleWorker) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			if w.stop != nil {
				errs[i] = w.stop()
				w.stop = nil
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// exitedTransactions waits until every backend of dbname has exited, so
// all its counters are published, and reads the database's transactions.
func (s *suite) exitedTransactions(ctx context.Context, dbname string) (int64, error) {
	if err := s.waitNoBackends(ctx, dbname); err != nil {
		return 0, err
	}
	// A backend leaves pg_stat_activity just before it publishes its
	// counters on exit.
	if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
		return 0, err
	}
	return s.transactions(ctx, dbname)
}

func (s *suite) transactions(ctx context.Context, dbname string) (int64, error) {
	var n int64
	if err := s.srv.admin.QueryRow(ctx, transactionsSQL, dbname).Scan(&n); err != nil {
		return 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return n, nil
}

// waitNoBackends waits until no session is connected to dbname, so every
// counter it had has been published.
func (s *suite) waitNoBackends(ctx context.Context, dbname string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := s.backends(ctx, dbname)
		if err != nil {
			return err
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *suite) backends(ctx context.Context, dbname string) ([]int, error) {
	rows, err := s.srv.admin.Query(ctx, backendsSQL, dbname)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, int(pid))
	}
	return pids, rows.Err()
}

// backendCPU returns the CPU milliseconds each backend of dbname has used,
// or nil when they cannot be read here (PostgreSQL runs elsewhere).
func (s *suite) backendCPU(ctx context.Context, dbname string) map[int]float64 {
	pids, err := s.backends(ctx, dbname)
	if err != nil {
		return nil
	}
	out := make(map[int]float64, len(pids))
	for _, pid := range pids {
		ms, ok := processCPU(pid)
		if !ok {
			return nil
		}
		out[pid] = ms
	}
	return out
}

// processCPU reads the user+system CPU of a local postgres process.
func processCPU(pid int) (ms float64, ok bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The fields after "(comm)": state is the first, utime the 12th, stime the 13th.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) * 1000 / clockTicks, true
}

// cpuDelta sums what each backend used between the two readings; a backend
// that appeared in between counts whole. -1 when either reading failed.
func cpuDelta(before, after map[int]float64) float64 {
	if before == nil || after == nil {
		return -1
	}
	var sum float64
	for pid, ms := range after {
		sum += ms - before[pid]
	}
	return sum
}
