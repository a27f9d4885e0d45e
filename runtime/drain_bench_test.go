package runtime_test

import (
	"context"
	"flag"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	benchreport "github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// BenchmarkDrainCPU drains a backlog of no-op jobs and reports the Go CPU
// the process spent per job, the figure the drain scenario of fila bench
// prints, without the bench's producers and progress line in the profile:
//
//	go test ./runtime -run '^$' -bench DrainCPU -benchtime 1x -drain-profile /tmp/drain.prof
//
// Each iteration is one drain of FILA_DRAIN_JOBS jobs (100 000 by default).
func BenchmarkDrainCPU(b *testing.B) {
	jobs := 100_000
	if s := os.Getenv("FILA_DRAIN_JOBS"); s != "" {
		var err error
		if jobs, err = strconv.Atoi(s); err != nil {
			b.Fatalf("FILA_DRAIN_JOBS=%q: %v", s, err)
		}
	}
	db := newDB(b)
	ctx := context.Background()
	var done atomic.Int64
	kind := runtime.Kind{Name: "noop", Handler: func(context.Context, *runtime.Job) error {
		done.Add(1)
		return nil
	}}
	var cpu, wall time.Duration
	var allocs uint64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'noop' FROM generate_series(1, $1::int)`, jobs); err != nil {
			b.Fatal(err)
		}
		done.Store(0)
		// Without TLS, as fila bench runs.
		cfg := runtime.Config{DSN: benchreport.PlainTransport(db.DSN), ListenDSN: benchreport.PlainTransport(db.DirectDSN), Kinds: []runtime.Kind{kind},
			Concurrency: 1000, ClaimBatch: 1000, SafetyPoll: time.Minute, Logger: zap.NewNop()}
		rt, err := runtime.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if p := *drainProfile; p != "" && i == 0 {
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		var m0, m1 goruntime.MemStats
		goruntime.ReadMemStats(&m0)
		c0, t0 := processCPU(), time.Now()
		errc := make(chan error, 1)
		go func() { errc <- rt.Run(ctx) }()
		for {
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state <> 'completed'`).Scan(&left); err != nil {
				b.Fatal(err)
			}
			if left == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond) // the check's own cost stays small beside the drain
		}
		cpu += processCPU() - c0
		wall += time.Since(t0)
		goruntime.ReadMemStats(&m1)
		allocs += m1.Mallocs - m0.Mallocs
		b.StopTimer()
		if *drainProfile != "" && i == 0 {
			pprof.StopCPUProfile()
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = rt.Stop(sctx)
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `DELETE FROM fila_jobs`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N) * float64(jobs)
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/n, "cpu-µs/job")
	b.ReportMetric(n/wall.Seconds(), "jobs/s")
	b.ReportMetric(float64(allocs)/n, "allocs/job")
}

var drainProfile = flag.String("drain-profile", "", "BenchmarkDrainCPU: write a CPU profile of the first drain to this file")

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
