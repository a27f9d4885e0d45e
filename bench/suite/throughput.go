package suite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// SystemFila names Fila's own rows.
const SystemFila = bench.SystemFila

// Throughput modes.
const (
	ThroughputDrain      = bench.ThroughputDrain
	ThroughputDrainTyped = bench.ThroughputDrainTyped
	ThroughputSteady     = bench.ThroughputSteady
	ThroughputSQLFloor   = bench.ThroughputSQLFloor
)

// insertChunk is how many jobs one InsertMany statement carries.
const insertChunk = 5000

// steadyProducers insert steadyBatch jobs per transaction each, as fast as
// they can, while the workers run.
const (
	steadyProducers = 4
	steadyBatch     = 100
)

// sqlFloorLoops is how many claim-and-complete loops the SQL floor runs at
// once, one per core of a small machine.
const sqlFloorLoops = 2

func noop(context.Context, *runtime.Job) error { return nil }

// benchArgs is the typed payload of the typed drain's jobs: the backlog's
// {} decodes into it.
type benchArgs struct {
	N int `json:"n,omitempty"`
}

func (benchArgs) Kind() string { return benchKind }

// backlog inserts n no-op jobs with InsertMany and refreshes statistics.
func (s *suite) backlog(ctx context.Context, db *database, n int, label string) error {
	pool, err := db.pool(ctx, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	prog := report.NewProgress(s.opts.Progress, label, n)
	defer prog.Done()
	batch := make([]runtime.InsertParams, 0, insertChunk)
	for done := 0; done < n; {
		batch = batch[:0]
		for i := 0; i < insertChunk && done+i < n; i++ {
			batch = append(batch, runtime.InsertParams{Kind: benchKind})
		}
		if _, err := runtime.InsertMany(ctx, pool, batch); err != nil {
			return err
		}
		done += len(batch)
		prog.Add(len(batch))
	}
	_, err = pool.Exec(ctx, analyzeSQL)
	return err
}

// throughputConfig is the runtime the drain and steady scenarios run.
func (s *suite) throughputConfig(dsn string) runtime.Config {
	cfg := runtimeConfig(ModeNotify, dsn, s.log, noop)
	cfg.Concurrency = s.opts.Workers
	cfg.ClaimBatch = s.opts.ClaimBatch
	return cfg
}

func (s *suite) configNote() string {
	return fmt.Sprintf("Concurrency=%d ClaimBatch=%d", s.opts.Workers, s.opts.ClaimBatch)
}

func (s *suite) drain(ctx context.Context) error {
	// The untyped drain, then the same with a typed handler: the second row
	// says what decoding each payload into a type costs.
	for _, typed := range []bool{false, true} {
		res, err := s.runDrain(ctx, typed)
		if err != nil {
			return err
		}
		s.res.Throughput = append(s.res.Throughput, res)
	}
	if d, t := s.res.Throughput[len(s.res.Throughput)-2], s.res.Throughput[len(s.res.Throughput)-1]; d.JobsPerSec > 0 {
		s.res.note("drain with a typed handler (runtime.Work, each payload decoded into a struct): %.0f jobs/s, %.2f× the untyped drain's %.0f in this run",
			t.JobsPerSec, t.JobsPerSec/d.JobsPerSec, d.JobsPerSec)
	}
	// The peers' drains now, right after Fila's.
	if err := s.runPeers(ctx, ScenarioDrain, 0); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.res.note("peers: drain: failed: %v", err)
	}
	return nil
}

// runDrain inserts DrainJobs no-op jobs with no worker running, then starts
// the runtime (with a typed handler when typed) and times until every
// job's completion is written.
func (s *suite) runDrain(ctx context.Context, typed bool) (res bench.ThroughputResult, err error) {
	n := s.opts.DrainJobs
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	if err := s.backlog(ctx, db, n, "drain: insert"); err != nil {
		return res, err
	}
	cfg := s.throughputConfig(db.dsn)
	mode := ThroughputDrain
	if typed {
		cfg.Kinds = []runtime.Kind{runtime.Work(func(context.Context, *runtime.Job, benchArgs) error { return nil })}
		mode = ThroughputDrainTyped
	}
	rt, err := runtime.New(cfg)
	if err != nil {
		return res, err
	}
	prog := report.NewProgress(s.opts.Progress, mode, n)
	defer prog.Done()
	cpu0 := readProcCPU()
	begin := time.Now()
	stop, err := started(ctx, rt)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	deadline := time.Now().Add(time.Minute + time.Duration(n)*time.Millisecond)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		done := rt.Stats().Completed
		prog.Set(int(done))
		if done >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("drain: %d of %d jobs completed before the deadline", done, n)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	elapsed := time.Since(begin)
	cpu := readProcCPU().sub(cpu0)
	return bench.ThroughputResult{
		System: SystemFila, Mode: mode, Jobs: n, Workers: s.opts.Workers,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds(), Config: s.configNote(),
		GoCPUMs: cpu.total.Seconds() * 1000, GoGCCPUMs: cpu.gc.Seconds() * 1000,
	}, nil
}

func (s *suite) steady(ctx context.Context) error {
	res, err := s.runSteady(ctx)
	if err != nil {
		return err
	}
	s.res.Throughput = append(s.res.Throughput, res)
	return nil
}

// runSteady runs producers and workers at once for Duration and counts the
// jobs completed meanwhile. The producers insert as fast as they can, so
// the figure is what the workers keep up with while sharing the machine
// with them; the backlog left at the end says which side was ahead.
func (s *suite) runSteady(ctx context.Context) (res bench.ThroughputResult, err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	pool, err := db.pool(ctx, steadyProducers)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	rt, err := runtime.New(s.throughputConfig(db.dsn))
	if err != nil {
		return res, err
	}
	stop, err := started(ctx, rt)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, stop()) }()

	prog := report.NewProgress(s.opts.Progress, "steady", 0)
	defer prog.Done()
	pctx, stopProducers := context.WithTimeout(ctx, s.opts.Duration)
	defer stopProducers()
	var (
		inserted atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	batch := make([]runtime.InsertParams, steadyBatch)
	for i := range batch {
		batch[i] = runtime.InsertParams{Kind: benchKind}
	}
	begin := time.Now()
	before := rt.Stats().Completed
	for range steadyProducers {
		wg.Go(func() {
			for pctx.Err() == nil {
				if _, err := runtime.InsertMany(pctx, pool, batch); err != nil {
					if pctx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
					}
					return
				}
				inserted.Add(steadyBatch)
			}
		})
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for pctx.Err() == nil {
		select {
		case <-pctx.Done():
		case <-tick.C:
			prog.Set(int(rt.Stats().Completed - before))
		}
	}
	completed := rt.Stats().Completed - before
	elapsed := time.Since(begin)
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if firstErr != nil {
		return res, fmt.Errorf("producer: %w", firstErr)
	}
	ins := inserted.Load()
	return bench.ThroughputResult{
		System: SystemFila, Mode: ThroughputSteady, Jobs: int(completed), Workers: s.opts.Workers,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(completed) / elapsed.Seconds(),
		Config: fmt.Sprintf("%s; %d producers × %d jobs/tx inserted %.0f/s, backlog %d at the end",
			s.configNote(), steadyProducers, steadyBatch, float64(ins)/elapsed.Seconds(), max(ins-int64(completed), 0)),
	}, nil
}

func (s *suite) sqlFloor(ctx context.Context) error {
	res, err := s.runSQLFloor(ctx)
	if err != nil {
		return err
	}
	s.res.Throughput = append(s.res.Throughput, res)
	return nil
}

// runSQLFloor drains DrainJobs jobs with no runtime at all: loops, each on
// a direct connection of its own, that claim a batch with the minimal batch
// claim and complete it with one fenced UPDATE, both prepared, until the
// queue is empty. Timed from opening the connections to the last commit.
func (s *suite) runSQLFloor(ctx context.Context) (res bench.ThroughputResult, err error) {
	n := s.opts.DrainJobs
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	if err := s.backlog(ctx, db, n, "sql floor: insert"); err != nil {
		return res, err
	}
	prog := report.NewProgress(s.opts.Progress, "sql floor", n)
	defer prog.Done()
	var (
		done  atomic.Int64
		wg    sync.WaitGroup
		errs  = make([]error, sqlFloorLoops)
		loops = make([]*sqlFloorLoop, sqlFloorLoops)
	)
	defer func() {
		for _, l := range loops {
			if l != nil {
				l.close(context.WithoutCancel(ctx))
			}
		}
	}()
	// The clock starts before the loops connect, as the drain's starts
	// before the runtime does: a program that drains a backlog opens its
	// connections too.
	begin := time.Now()
	for i := range sqlFloorLoops {
		wg.Go(func() {
			l, err := newSQLFloorLoop(ctx, db.dsn)
			if err != nil {
				errs[i] = err
				return
			}
			loops[i] = l
			for {
				k, err := l.claimAndComplete(ctx, s.opts.ClaimBatch)
				if err != nil {
					errs[i] = err
					return
				}
				if k == 0 {
					return
				}
				prog.Add(k)
				done.Add(int64(k))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if got := done.Load(); got != int64(n) {
		return res, fmt.Errorf("sql floor completed %d of %d jobs", got, n)
	}
	return bench.ThroughputResult{
		System: SystemFila, Mode: ThroughputSQLFloor, Jobs: n, Workers: sqlFloorLoops,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds(),
		Config: fmt.Sprintf("%d loops × claim %d + one fenced UPDATE, prepared, custom plans, direct connections, no runtime", sqlFloorLoops, s.opts.ClaimBatch),
	}, nil
}

// Names of the SQL floor's prepared statements on each loop's connection.
const (
	claimBatchStmt = "fila_bench_claim_batch"
	completeStmt   = "fila_bench_complete"
)

// sqlFloorLoop is one claim-and-complete loop's direct connection, with
// both statements prepared.
type sqlFloorLoop struct {
	conn     *pgx.Conn
	ids      []int64
	attempts []int32
}

func newSQLFloorLoop(ctx context.Context, dsn string) (*sqlFloorLoop, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	// Planned for each batch. Left to choose, a prepared statement switches
	// to a generic plan after five runs, and the claim's generic plan
	// joined its batch to a sequential scan of the whole table: the floor
	// drained 9 000 to 15 000 jobs/s, below the runtime it bounds, and
	// 45 000 to 62 000 with custom plans.
	cfg.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sql floor connection: %w", err)
	}
	for name, sql := range map[string]string{claimBatchStmt: claimBatchSQL, completeStmt: completeSQL} {
		if _, err := conn.Prepare(ctx, name, sql); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("prepare %s: %w", name, err)
		}
	}
	return &sqlFloorLoop{conn: conn}, nil
}

func (l *sqlFloorLoop) close(ctx context.Context) { _ = l.conn.Close(ctx) }

// claimAndComplete claims up to batch jobs and completes them, returning
// how many it completed.
func (l *sqlFloorLoop) claimAndComplete(ctx context.Context, batch int) (int, error) {
	rows, err := l.conn.Query(ctx, claimBatchStmt, floorQueue, batch, floorLease)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	l.ids, l.attempts = l.ids[:0], l.attempts[:0]
	var id int64
	var attempt int32
	_, err = pgx.ForEachRow(rows, []any{&id, &attempt}, func() error {
		l.ids, l.attempts = append(l.ids, id), append(l.attempts, attempt)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(l.ids) == 0 {
		return 0, nil
	}
	tag, err := l.conn.Exec(ctx, completeStmt, l.ids, l.attempts)
	if err != nil {
		return 0, fmt.Errorf("complete: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
