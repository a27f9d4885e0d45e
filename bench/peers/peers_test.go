package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	log := zaptest.NewLogger(t)
	return &runner{adminDSN: envOr(defaultDSN, "TEST_DATABASE_URL"), log: log,
		node: sync.OnceValues(func() (nodeModule, error) { return nodeSetup(context.Background(), "node", log) })}
}

// requireNode skips a Node.js peer's test when node or its packages cannot
// be had here, unless FILA_TEST_REQUIRE=all (as in CI) makes that a failure.
func requireNode(t *testing.T, r *runner, s spec) {
	t.Helper()
	if s.system != systemGraphile && s.system != systemPgBoss {
		return
	}
	if _, err := r.node(); err != nil {
		if os.Getenv("FILA_TEST_REQUIRE") == "all" {
			t.Fatalf("Node.js peers unavailable: %v", err)
		}
		t.Skipf("Node.js peers unavailable: %v", err)
	}
}

func TestLatencyScenarios(t *testing.T) {
	r := testRunner(t)
	for _, s := range latencySpecs(4, r.node, r.log) {
		t.Run(s.system+"/"+s.mode, func(t *testing.T) {
			requireNode(t, r, s)
			rate, n := 50, 50
			if s.system == systemPgBoss && s.mode == "default" {
				rate, n = 1, 1 // one job every 2 s
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := r.runLatency(ctx, s, rate, n)
			require.NoError(t, err)
			require.Equal(t, s.system, res.System)
			require.Equal(t, s.mode, res.Mode)
			require.Equal(t, rate, res.RatePerSec)
			require.Positive(t, res.Count)
			// Measured, so just under the asked rate when on time, and
			// never far above it: jobs are released on schedule.
			require.Positive(t, res.AchievedPerSec)
			require.LessOrEqual(t, res.AchievedPerSec, 1.01*float64(rate))
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
	for _, group := range drainSpecs(4, r.node, r.log) {
		s := group[0] // one candidate per group is enough to prove the path
		t.Run(s.system+"/"+s.mode, func(t *testing.T) {
			requireNode(t, r, s)
			// Only a guard against a hang: this checks that each peer's drain
			// path works, not its speed. A fixed 40 s was exceeded by
			// graphile-worker's default (one job at a time) on a machine busy
			// with four other processes, beside which this pass runs niced.
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard(t))
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

	_, err := r.runLatency(ctx, s, 10, 10)
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
			{System: "pg-boss", Mode: "tuned-10w-b100-500ms", RatePerSec: 100, Count: 500, P50Ms: 120, P99Ms: 260},
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
	require.Contains(t, s, "notify p50 at 100/s ≤ the best peer's: met (2.50 ms vs river tuned-10ms 5.00 ms, 0.50×; margin +50%)")
	require.Contains(t, s, "notify p99 at 100/s ≤ the best peer's: MISSED (10.0 ms vs river tuned-10ms 8.00 ms, 1.25×; margin -25%)")
	require.Contains(t, s, "notify p50 at 100/s ≤ 1.1× the listen+claim floor's: MISSED (2.50 ms vs floor 2.00 ms, 1.25×; margin -14%)")
	require.Contains(t, s, "drain ≥ 2.0× the best peer's best tuned drain: met (20000/s vs river tuned-500w-1ms 10000/s, 2.00×; margin +0.0%)")
	require.Contains(t, s, "idle notify worker: at most one query per safety poll plus keep-alives and liveness refreshes: met")
	require.Contains(t, s, "drain ≥ 80% of the raw SQL floor: not measured")

	// Without Fila's run there is nothing to compare the peers with.
	out.Reset()
	require.NoError(t, printResults(&out, peers, nil, "not run"))
	require.Contains(t, out.String(), "notify p50 at 100/s ≤ the best peer's: not measured")

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
	o, err := parseFlags([]string{"--rates", "10, 200", "--duration", "2s", "--scenarios", "drain", "--systems", "gue,pg-boss"})
	require.NoError(t, err)
	require.Equal(t, []int{10, 200}, o.rates)
	require.Equal(t, 2*time.Second, o.duration)
	require.Equal(t, 200, o.minSamples)
	require.Equal(t, map[string]bool{"drain": true}, o.scenarios)
	require.Equal(t, map[string]bool{"gue": true, "pg-boss": true}, o.systems)
	// At 10/s, 2 s would give 20 samples: the run is made long enough for 200.
	require.Equal(t, 200, jobsFor(10, o.duration, o.minSamples))
	require.Equal(t, 400, jobsFor(200, o.duration, o.minSamples))
	for _, bad := range [][]string{{"--rates", "0"}, {"--scenarios", "steady"}, {"--systems", "sidekiq"}, {"extra"}} {
		_, err := parseFlags(bad)
		require.Error(t, err, fmt.Sprint(bad))
	}
}

// TestMain checks that no scenario leaves goroutines behind: the command
// runs a dozen scenarios in one process, so a leak in one would load the
// ones after it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// internal/testdb (the import tests' databases) keeps one
		// administrative pool for the whole test binary.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

// TestExactlyOnceCatches proves the SQL checks fail when a job ran twice or
// was not completed, on a table whose statistics say so.
func TestExactlyOnceCatches(t *testing.T) {
	r := testRunner(t)
	ctx := context.Background()
	db, err := r.createDatabase(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.drop()) }()
	pool, err := db.pool(ctx, 1)
	require.NoError(t, err)
	// Three jobs, each claimed with one update and deleted on completion,
	// one of them claimed a second time.
	_, err = pool.Exec(ctx, `CREATE TABLE jobs (id int, attempts int DEFAULT 0);
INSERT INTO jobs (id) SELECT generate_series(1, 3);
UPDATE jobs SET attempts = attempts + 1;
UPDATE jobs SET attempts = attempts + 1 WHERE id = 2;
DELETE FROM jobs`)
	require.NoError(t, err)
	pool.Close()
	conn, err := db.quiet(ctx)
	require.NoError(t, err)
	defer conn.Close(ctx)

	require.ErrorContains(t, deletedOnce(ctx, conn, "jobs", 3, true, 1), "claimed more than once")
	require.ErrorContains(t, deletedOnce(ctx, conn, "jobs", 2, true, 1), "3 rows deleted on completion, the handlers ran 2")
	// A lost job may have been claimed and given back: only deletions count then.
	require.NoError(t, deletedOnce(ctx, conn, "jobs", 3, false, 1))
	// gue updates a row only for a failed attempt: any update is a retry.
	require.ErrorContains(t, deletedOnce(ctx, conn, "jobs", 3, true, 0), "4 row updates for 3 jobs")

	require.NoError(t, completedOnce(3, 0, 3))
	require.ErrorContains(t, completedOnce(3, 1, 3), "1 jobs were claimed more than once")
	require.ErrorContains(t, completedOnce(2, 0, 3), "shows 2 jobs completed, the handlers ran 3")
}

func TestRecorderCountsRepeatedRuns(t *testing.T) {
	rec := newRecorder(2)
	now := time.Now()
	rec.jobStarted(0, now)
	rec.jobStarted(0, now.Add(time.Millisecond))
	rec.jobStarted(-1, now)
	require.EqualValues(t, 1, rec.started.Load())
	require.EqualValues(t, 1, rec.repeated.Load())
	require.EqualValues(t, 1, rec.untimed.Load())
}

func TestMonoClockMatchesTimeNow(t *testing.T) {
	c := newMonoClock()
	before := time.Now()
	at := c.at(monoNow())
	after := time.Now()
	// Readings of CLOCK_MONOTONIC land between time.Now() readings around
	// them: Go's monotonic clock is the same clock.
	require.False(t, at.Before(before.Add(-time.Microsecond)), "%s before %s", at, before)
	require.False(t, at.After(after.Add(time.Microsecond)), "%s after %s", at, after)
}

// hangGuard is how long a scenario of a test may run before it counts as
// hung: until a minute before the test binary's own deadline (go test
// -timeout), so the run fails with the scenario named rather than with
// go test's panic, or five minutes without one.
func hangGuard(t *testing.T) time.Duration {
	d := 5 * time.Minute
	if end, ok := t.Deadline(); ok {
		d = max(time.Until(end)-time.Minute, time.Minute)
	}
	return d
}
