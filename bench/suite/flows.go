package suite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// Modes of the flows scenario's rows.
const (
	ThroughputFlowsPlain    = "flows-plain"
	ThroughputFlowsWorkflow = "flows-workflow"
	ThroughputFlowsSequence = "flows-sequences"
)

// flowsWidth is the width of the flows scenario's workflow: DrainJobs jobs
// in layers of this many, each job after two of the layer before.
const flowsWidth = 100

// flows drains the same number of jobs three ways in one run: plain jobs,
// one workflow of layers, and sequences of three. Each backlog is written
// before the runtime starts; the time is from its start to the last
// completion, and the insert's time is noted beside it.
func (s *suite) flows(ctx context.Context) error {
	var plain float64
	for _, mode := range []string{ThroughputFlowsPlain, ThroughputFlowsWorkflow, ThroughputFlowsSequence} {
		res, insert, err := s.runFlowDrain(ctx, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		s.res.Throughput = append(s.res.Throughput, res)
		if mode == ThroughputFlowsPlain {
			plain = res.JobsPerSec
		}
		s.res.note("%s: %d jobs inserted in %.2f s (%.0f jobs/s), drained at %.0f jobs/s, %.2f× the plain drain in this run",
			mode, res.Jobs, insert.Seconds(), float64(res.Jobs)/insert.Seconds(), res.JobsPerSec, res.JobsPerSec/plain)
	}
	return nil
}

func (s *suite) runFlowDrain(ctx context.Context, mode string) (res bench.ThroughputResult, insert time.Duration, err error) {
	n := s.opts.DrainJobs / flowsWidth * flowsWidth
	if n == 0 {
		n = flowsWidth
	}
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, 0, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	pool, err := db.pool(ctx, 1)
	if err != nil {
		return res, 0, err
	}
	defer pool.Close()
	began := time.Now()
	switch mode {
	case ThroughputFlowsPlain:
		jobs := make([]runtime.InsertParams, n)
		for i := range jobs {
			jobs[i] = runtime.InsertParams{Kind: benchKind}
		}
		_, err = runtime.InsertMany(ctx, pool, jobs)
	case ThroughputFlowsWorkflow:
		jobs := make([]runtime.WorkflowJob, n)
		for i := range jobs {
			layer, at := i/flowsWidth, i%flowsWidth
			jobs[i] = runtime.WorkflowJob{Name: fmt.Sprint(i), InsertParams: runtime.InsertParams{Kind: benchKind}}
			if layer > 0 {
				jobs[i].After = []string{fmt.Sprint((layer-1)*flowsWidth + at), fmt.Sprint((layer-1)*flowsWidth + (at+1)%flowsWidth)}
			}
		}
		_, err = runtime.InsertWorkflow(ctx, pool, jobs)
	case ThroughputFlowsSequence:
		jobs := make([]runtime.InsertParams, n)
		for i := range jobs {
			jobs[i] = runtime.InsertParams{Kind: benchKind, InsertOpts: runtime.InsertOpts{Sequence: fmt.Sprint("s", i%(n/3))}}
		}
		_, err = runtime.InsertMany(ctx, pool, jobs)
	}
	if err != nil {
		return res, 0, fmt.Errorf("insert: %w", err)
	}
	insert = time.Since(began)
	if _, err := pool.Exec(ctx, analyzeSQL); err != nil {
		return res, 0, err
	}
	rt, err := runtime.New(s.throughputConfig(db.dsn))
	if err != nil {
		return res, 0, err
	}
	prog := report.NewProgress(s.opts.Progress, mode, n)
	defer prog.Done()
	cpu0 := readProcCPU()
	begin := time.Now()
	stop, err := started(ctx, rt)
	if err != nil {
		return res, 0, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*time.Millisecond)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		done := rt.Stats().Completed
		prog.Set(int(done))
		if done >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			return res, 0, fmt.Errorf("%d of %d jobs completed before the deadline", done, n)
		}
		select {
		case <-ctx.Done():
			return res, 0, ctx.Err()
		case <-tick.C:
		}
	}
	elapsed := time.Since(begin)
	cpu := readProcCPU().sub(cpu0)
	return bench.ThroughputResult{
		System: SystemFila, Mode: mode, Jobs: n, Workers: s.opts.Workers,
		Seconds: elapsed.Seconds(), JobsPerSec: float64(n) / elapsed.Seconds(), Config: s.configNote(),
		GoCPUMs: cpu.total.Seconds() * 1000, GoGCCPUMs: cpu.gc.Seconds() * 1000,
	}, insert, nil
}
