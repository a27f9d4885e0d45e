package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/bench"
)

// The scenario tests run every peer configuration at a tiny size against a
// real PostgreSQL (TEST_DATABASE_URL, else the local default), so CI proves
// the harness works end to end: schemas, inserts, workers, the clock and the
// completion check. They run one after another, since each configuration
// opens up to 22 connections. The numbers themselves are not checked: at
// this size they mean nothing.

func testRunner(t *testing.T) *runner {
	t.Helper()
	return &runner{adminDSN: envOr(defaultDSN, "TEST_DATABASE_URL"), log: zaptest.NewLogger(t)}
}

func TestLatencyScenarios(t *testing.T) {
	r := testRunner(t)
	const rate = 50
	for _, s := range latencySpecs(4, r.log) {
		t.Run(s.system+"/"+s.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			res, err := r.runLatency(ctx, s, rate, time.Second)
			require.NoError(t, err)
			require.Equal(t, s.system, res.System)
			require.Equal(t, s.mode, res.Mode)
			require.Equal(t, rate, res.RatePerSec)
			require.Positive(t, res.Count)
			// Measured, so just under the asked rate when on time, and
			// never far above it: jobs are released on schedule.
			require.Positive(t, res.AchievedPerSec)
			require.LessOrEqual(t, res.AchievedPerSec, 1.01*rate)
			require.Zero(t, res.Lost, "jobs inserted but not started within %s", lostAfter)
			require.Len(t, res.SamplesMs, res.Count)
			require.Positive(t, res.P50Ms)
			require.LessOrEqual(t, res.P50Ms, res.P99Ms)
			require.LessOrEqual(t, res.P99Ms, res.MaxMs)
		})
	}
}

func TestDrainScenarios(t *testing.T) {
	r := testRunner(t)
	const jobs = 200
	for _, group := range drainSpecs(4, r.log) {
		s := group[0] // one candidate per group is enough to prove the path
		t.Run(s.system+"/"+s.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			res, err := r.runDrain(ctx, s, jobs)
			require.NoError(t, err)
			require.Equal(t, jobs, res.Jobs)
			require.Equal(t, s.workers, res.Workers)
			require.Positive(t, res.Seconds)
			require.InDelta(t, float64(jobs)/res.Seconds, res.JobsPerSec, 1e-6)
		})
	}
}

// failingPeer fails in setup, after its database has been created.
type failingPeer struct{ peer }

func (failingPeer) setup(context.Context, *pgxpool.Pool, startFunc) error {
	return errors.New("setup fails on purpose")
}
func (failingPeer) poolSize() int               { return 1 }
func (failingPeer) stop(context.Context) error  { return nil }
func (failingPeer) start(context.Context) error { return nil }

func TestDatabaseDroppedOnError(t *testing.T) {
	r := testRunner(t)
	var created []string
	r.created = func(name string) { created = append(created, name) }
	s := spec{system: "none", mode: "failing", new: func() peer { return failingPeer{} }}
	ctx := context.Background()

	_, err := r.runLatency(ctx, s, 10, time.Second)
	require.ErrorContains(t, err, "on purpose")
	_, err = r.runDrain(ctx, s, 10)
	require.ErrorContains(t, err, "on purpose")

	require.Len(t, created, 2)
	pool, err := pgxpool.New(ctx, r.adminDSN)
	require.NoError(t, err)
	defer pool.Close()
	var left int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", created).Scan(&left))
	require.Zero(t, left, "databases left behind: %v", created)
}

func TestComparisonRatios(t *testing.T) {
	peers := &results{
		Machine:    machine{text: "test machine"},
		Latency:    []bench.LatencyResult{{System: "river", Mode: "default", RatePerSec: 100, Count: 500, P50Ms: 40, P99Ms: 100}},
		Throughput: []bench.ThroughputResult{{System: "river", Mode: "default", Jobs: 1000, Workers: 100, Seconds: 2, JobsPerSec: 500}},
	}
	fila := &results{
		Latency: []bench.LatencyResult{
			{System: "fila", Mode: "poll-50ms", RatePerSec: 100, Count: 500, P50Ms: 25, P99Ms: 50},
			{System: "fila", Mode: "notify", RatePerSec: 100, Count: 500, P50Ms: 2, P99Ms: 5},
		},
		Throughput: []bench.ThroughputResult{{System: "fila", Mode: "drain", Jobs: 1000, Workers: 16, Seconds: 1, JobsPerSec: 1000}},
	}
	var out bytes.Buffer
	require.NoError(t, printResults(&out, peers, fila, ""))
	s := out.String()
	// River's p50 and p99 against Fila notify's, not poll-50ms's.
	require.Contains(t, s, "20.0×")
	require.Contains(t, s, "0.50×") // River drains 500 jobs/s ÷ Fila's 1000
	require.Contains(t, s, "1.00×")

	out.Reset()
	require.NoError(t, printResults(&out, peers, nil, "Fila's own benchmark was not run (test)."))
	require.Contains(t, out.String(), "Note: Fila's own benchmark was not run (test).")
	require.NotContains(t, out.String(), "vs fila")
}

func TestGoalsFromOneRun(t *testing.T) {
	peers := &results{
		Machine: machine{text: "test machine"},
		Latency: []bench.LatencyResult{
			{System: "river", Mode: "default", RatePerSec: 100, Count: 500, P50Ms: 40, P99Ms: 100},
			{System: "river", Mode: "tuned-10ms", RatePerSec: 100, Count: 500, P50Ms: 5, P99Ms: 8},
		},
		Throughput: []bench.ThroughputResult{{System: "river", Mode: "tuned-500w-1ms", Jobs: 1000, Workers: 500, Seconds: 0.1, JobsPerSec: 10000}},
	}
	fila := &results{
		Latency: []bench.LatencyResult{
			{System: "floor", Mode: "listen+claim", RatePerSec: 100, Count: 500, P50Ms: 2, P99Ms: 4},
			{System: "fila", Mode: "notify", RatePerSec: 100, Count: 500, P50Ms: 2.5, P99Ms: 10},
		},
		Throughput: []bench.ThroughputResult{{System: "fila", Mode: "drain", Jobs: 1000, Workers: 16, Seconds: 0.05, JobsPerSec: 20000}},
		Idle:       []bench.IdleResult{{System: "fila", Mode: "notify", Seconds: 10, Transactions: 1, SafetyPollSec: 30, PingSec: 10}},
	}
	var out bytes.Buffer
	require.NoError(t, printResults(&out, peers, fila, ""))
	s := out.String()
	require.Contains(t, s, "notify p50 at 100/s ≤ River tuned's: met (2.50 ms vs river tuned-10ms 5.00 ms, 0.50×)")
	require.Contains(t, s, "notify p99 at 100/s ≤ River tuned's: MISSED (10.0 ms vs river tuned-10ms 8.00 ms, 1.25×)")
	require.Contains(t, s, "notify p50 at 100/s ≤ 1.3× the listen+claim floor's: met (2.50 ms vs floor 2.00 ms, 1.25×)")
	require.Contains(t, s, "drain ≥ 1.5× River's best tuned drain: met (20000/s vs river tuned-500w-1ms 10000/s, 2.00×)")
	require.Contains(t, s, "idle notify worker: at most one query per safety poll plus keep-alives: met")
	require.Contains(t, s, "drain ≥ 50% of the raw SQL floor: not measured")

	// Without Fila's run there is nothing to compare the peers with.
	out.Reset()
	require.NoError(t, printResults(&out, peers, nil, "not run"))
	require.Contains(t, out.String(), "notify p50 at 100/s ≤ River tuned's: not measured")

	path := filepath.Join(t.TempDir(), "merged.json")
	require.NoError(t, writeJSON(path, peers.merge(fila)))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var back results
	require.NoError(t, json.Unmarshal(b, &back))
	require.Len(t, back.Idle, 1, "Fila's idle rows survive the merge")
	require.NotEmpty(t, back.Goals)
}

func TestResultsMachineObjectOrString(t *testing.T) {
	var r results
	in := `{"machine":{"go_version":"go1.26.8","os":"linux","arch":"amd64","cpus":2,"gomaxprocs":2},"latency":[{"system":"fila","mode":"notify","rate_per_sec":10,"count":0,"lost":0,"p50_ms":0,"p90_ms":0,"p99_ms":0,"p999_ms":0,"max_ms":0}],"throughput":[],"idle":[]}`
	require.NoError(t, json.Unmarshal([]byte(in), &r))
	require.Equal(t, "go1.26.8 linux/amd64, 2 CPUs", r.Machine.String())
	require.Len(t, r.Latency, 1)
	out, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(out), `"machine":{"go_version":"go1.26.8"`)

	require.NoError(t, json.Unmarshal([]byte(`{"machine":"somewhere","latency":[],"throughput":[]}`), &r))
	require.Equal(t, "somewhere", r.Machine.String())
	require.Empty(t, r.Latency)
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--rates", "10, 200", "--duration", "2s", "--scenarios", "drain", "--systems", "gue"})
	require.NoError(t, err)
	require.Equal(t, []int{10, 200}, o.rates)
	require.Equal(t, 2*time.Second, o.duration)
	require.Equal(t, map[string]bool{"drain": true}, o.scenarios)
	require.Equal(t, map[string]bool{"gue": true}, o.systems)
	for _, bad := range [][]string{{"--rates", "0"}, {"--scenarios", "steady"}, {"--systems", "sidekiq"}, {"extra"}} {
		_, err := parseFlags(bad)
		require.Error(t, err, fmt.Sprint(bad))
	}
}

// TestMain checks that no scenario leaves goroutines behind: the command
// runs a dozen scenarios in one process, so a leak in one would load the
// ones after it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
