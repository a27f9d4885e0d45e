package suite

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

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
// ready: long enough for everything its start-up does after Ready (the claim
// the listener's first wake causes, recording its sleep and claiming once
// more, the row of fila_workers saying its wake source is up), so that the
// difference with the measured worker is only what idling costs. Polls in
// it cancel out: the window is the difference of the two workers' lives.
const baselineRun = 3 * time.Second

// idleWorker is one idle runtime in a database of its own.
type idleWorker struct {
	mode string
	// queues, when set, is how many queues it serves, with a safety poll
	// of IdleQueuesSafetyPoll; else one queue and the default.
	queues int
	db     *database
	stop   func() error
	ready  time.Time
	lived  time.Duration // from ready to stopped
	setup  int64         // the database's transactions before the worker started
}

// run starts the worker and waits until it is ready.
func (w *idleWorker) run(ctx context.Context, log *zap.Logger) error {
	cfg := runtimeConfig(w.mode, w.db.dsn, log, noop)
	if w.queues > 0 {
		cfg.Queues = make([]string, w.queues)
		for i := range cfg.Queues {
			cfg.Queues[i] = "q" + strconv.Itoa(i)
		}
		cfg.SafetyPoll = IdleQueuesSafetyPoll
	}
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	if w.stop, err = started(ctx, rt); err != nil {
		return fmt.Errorf("idle %s: %w", w.mode, err)
	}
	w.ready = time.Now()
	return nil
}

// halt stops the worker, which closes its connections.
func (w *idleWorker) halt() error {
	if w.stop == nil {
		return nil
	}
	err := w.stop()
	w.lived = time.Since(w.ready)
	w.stop = nil
	return err
}

// idle measures what an idle worker of each mode costs its database. The
// server publishes a backend's transaction counters lazily (at most once a
// second, and up to ten seconds late for a backend that goes idle), but
// always when the backend exits. So each mode runs two identical workers,
// started together, in databases of their own: one for the window, and a
// baseline stopped just after it is ready. Once both have exited, the
// difference of what their databases counted after set-up is what the
// window cost, with start-up (connections, registration, first claims)
// cancelled out. Every mode runs at once. Backend CPU is read from /proc
// over the window.
func (s *suite) idle(ctx context.Context) (err error) {
	var specs []idleWorker // what is measured: the modes, then notify workers of many queues
	for _, m := range s.availableModes(ScenarioIdle) {
		specs = append(specs, idleWorker{mode: m})
		if m == ModeNotify {
			for _, n := range s.opts.IdleQueues {
				specs = append(specs, idleWorker{mode: m, queues: n})
			}
		}
	}
	var all []*idleWorker
	defer func() {
		for _, w := range all {
			err = errors.Join(err, w.halt())
			if w.db != nil {
				err = errors.Join(err, w.db.drop())
			}
		}
	}()
	measured := make([]*idleWorker, len(specs))
	baseline := make([]*idleWorker, len(specs))
	hasNotify := false
	for i, sp := range specs {
		b, m := sp, sp
		baseline[i], measured[i] = &b, &m
		all = append(all, baseline[i], measured[i])
		hasNotify = hasNotify || sp.mode == ModeNotify
	}
	var control *queueControl
	if hasNotify {
		control = &queueControl{s: s}
		defer func() {
			err = errors.Join(err, control.stop(ctx))
			if control.db != nil {
				err = errors.Join(err, control.db.drop())
			}
		}()
	}
	// Databases, pools and workers all start at once: the workers of a mode
	// must start together to cancel each other's start-up out.
	errs := make([]error, len(all)+1)
	var wg sync.WaitGroup
	if control != nil {
		wg.Go(func() {
			if control.db, errs[len(all)] = s.srv.fresh(ctx); errs[len(all)] != nil {
				return
			}
			if errs[len(all)] = control.db.exec(ctx, vacuumSQL); errs[len(all)] == nil {
				errs[len(all)] = control.prepare(ctx)
			}
		})
	}
	for i, w := range all {
		wg.Go(func() {
			if w.db, errs[i] = s.srv.fresh(ctx); errs[i] != nil {
				return
			}
			// Leave autovacuum nothing to do in these databases: its
			// transactions would count as the worker's.
			if errs[i] = w.db.exec(ctx, vacuumSQL); errs[i] != nil {
				return
			}
			// Set-up (migrations, VACUUM) counts 206 to 210 transactions
			// in databases set up at once, where the workers' own start-ups
			// differ by one at most: it is taken out of each.
			if w.setup, errs[i] = s.exitedTransactions(ctx, w.db.name); errs[i] == nil {
				errs[i] = w.run(ctx, s.log)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	window := s.opts.IdleDuration
	// Seconds since the last measured worker was ready: the baseline run,
	// then the window.
	prog := report.NewProgress(s.opts.Progress, "idle", int((window + baselineRun).Seconds()))
	defer prog.Done()
	for i, w := range baseline {
		wg.Go(func() {
			errs[i] = sleepCtx(ctx, time.Until(w.ready.Add(baselineRun)))
			errs[i] = errors.Join(errs[i], w.halt())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("baseline workers: %w", err)
	}
	// The window starts as the baselines stop.
	if control != nil {
		if err := control.listen(ctx); err != nil {
			return err
		}
	}
	cpu0 := make([]map[int]float64, len(specs))
	for i, w := range measured {
		cpu0[i] = s.backendCPU(ctx, w.db.name)
	}
	var last time.Time
	for _, w := range measured {
		if w.ready.After(last) {
			last = w.ready
		}
	}
	// The window is what the measured worker lived beyond its baseline.
	names := make([]string, len(all))
	for i, w := range all {
		names[i] = w.db.name
	}
	autovacuumed := map[string]bool{}
	for time.Since(last) < window+baselineRun {
		if err := sleepCtx(ctx, min(100*time.Millisecond, window+baselineRun-time.Since(last))); err != nil {
			return err
		}
		if err := s.autovacuumWorkers(ctx, names, autovacuumed); err != nil {
			return err
		}
		prog.Set(int(time.Since(last).Seconds()))
	}
	cpu1 := make([]map[int]float64, len(specs))
	for i, w := range measured {
		cpu1[i] = s.backendCPU(ctx, w.db.name)
	}
	for i, w := range measured {
		wg.Go(func() { errs[i] = w.halt() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	var queueReads int64
	var controlListened time.Duration
	if control != nil {
		if queueReads, controlListened, err = control.queueReads(ctx); err != nil {
			return err
		}
	}
	for i, sp := range specs {
		m, label := sp.mode, sp.mode
		if sp.queues > 0 {
			label = fmt.Sprintf("%s, %d queues", m, sp.queues)
		}
		txM, err := s.exitedTransactions(ctx, measured[i].db.name)
		if err != nil {
			return err
		}
		txB, err := s.exitedTransactions(ctx, baseline[i].db.name)
		if err != nil {
			return err
		}
		s.log.Debug("idle transactions", zap.String("mode", label), zap.Int64("measured", txM), zap.Int64("baseline", txB),
			zap.Int64("measured_setup", measured[i].setup), zap.Int64("baseline_setup", baseline[i].setup))
		if autovacuumed[measured[i].db.name] || autovacuumed[baseline[i].db.name] {
			s.res.note("idle %s: an autovacuum worker visited one of its databases during the window; its transactions are counted too", label)
		}
		secs := (measured[i].lived - baseline[i].lived).Seconds()
		tx := (txM - measured[i].setup) - (txB - baseline[i].setup)
		if tx < 0 {
			// The two workers' start-ups differ by a statement or two (a
			// reconnect, a claim that raced the stop): the window cost less
			// than that noise.
			s.res.note("idle %s: the baseline worker ran %d more transactions than the measured one; counted as 0", label, -tx)
			tx = 0
		}
		var reads int64
		if m == ModeNotify && queueReads > 0 && controlListened > 0 {
			// Not the worker's doing: any LISTEN on this server paid them,
			// at the rate the bare LISTEN paid, over this worker's window
			// (the windows differ by how long each stop took, seconds on a
			// loaded machine).
			expected := int64(math.Round(float64(queueReads) * secs / controlListened.Seconds()))
			reads = min(expected, tx)
			tx -= reads
			s.res.note("idle %s: a bare LISTEN ran %d transactions in %.2f s reading other databases' notifications from the server's shared queue; the worker's listener paid as many a second over its %.2f s, %d not counted as its own",
				label, queueReads, controlListened.Seconds(), secs, reads)
		}
		r := bench.IdleResult{
			System: SystemFila, Mode: m, Queues: sp.queues, Seconds: secs,
			Transactions: tx, TxPerSec: float64(tx) / secs,
			Backends: len(cpu1[i]), CPUMs: cpuDelta(cpu0[i], cpu1[i]),
			QueueReads: reads, LivenessSec: runtime.LivenessIntervalDefault.Seconds(),
		}
		switch m {
		case ModeNotify:
			r.SafetyPollSec = fallbackpoll.SafetyPollDefault.Seconds()
			if sp.queues > 0 {
				r.SafetyPollSec = IdleQueuesSafetyPoll.Seconds()
			}
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// exitedTransactions waits until every backend of dbname has exited and
// published its counters, and reads the database's transactions.
func (s *suite) exitedTransactions(ctx context.Context, dbname string) (int64, error) {
	if err := s.waitNoBackends(ctx, dbname); err != nil {
		return 0, err
	}
	// A backend leaves pg_stat_activity just before it publishes its
	// counters on exit, which a busy machine may delay: read until the
	// count holds still.
	last, err := s.transactions(ctx, dbname)
	for range 20 {
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return 0, err
		}
		n, err := s.transactions(ctx, dbname)
		if err != nil || n == last {
			return n, err
		}
		last = n
	}
	return last, err
}

// autovacuumWorkers marks the databases of names an autovacuum worker is in.
func (s *suite) autovacuumWorkers(ctx context.Context, names []string, seen map[string]bool) error {
	rows, err := s.srv.admin.Query(ctx, autovacuumSQL, names)
	if err != nil {
		return fmt.Errorf("read pg_stat_activity: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return err
		}
		seen[name] = true
	}
	return rows.Err()
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
