package suite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/bench/suite"
	"github.com/fila-run/fila/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

// tiny runs scenarios at the smallest sizes that still exercise them.
func tiny(t *testing.T, scenarios ...string) *suite.Results {
	t.Helper()
	return tinyWith(t, func(*suite.Options) {}, scenarios...)
}

func tinyWith(t *testing.T, edit func(*suite.Options), scenarios ...string) *suite.Results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := suite.Options{
		DSN:              testdb.AdminURL(),
		Scenarios:        scenarios,
		Rates:            []int{50},
		Modes:            []string{suite.ModeNotify, suite.ModePoll50},
		Duration:         300 * time.Millisecond,
		MinSamples:       -1, // Duration alone: 15 jobs per run
		DrainJobs:        500,
		Workers:          20,
		ClaimBatch:       100,
		IdleDuration:     time.Second,
		IdleQueues:       []int{},
		ProducerCounts:   []int{1, 3},
		ProducerDuration: 200 * time.Millisecond,
		Logger:           zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
	edit(&opts)
	res, err := suite.Run(ctx, opts)
	require.NoError(t, err)
	for _, n := range res.Notes {
		// A busy machine may delay the producers or bring autovacuum in;
		// a failed or skipped run is an error.
		require.NotRegexp(t, "failed|skipped", n)
	}
	require.NotEmpty(t, res.Machine.PostgresVersion)
	return res
}

func requireOrdered(t *testing.T, l bench.LatencyResult) {
	t.Helper()
	require.Positive(t, l.Count, "%s %s", l.System, l.Mode)
	// The producers' reached rate is measured, not copied from the asked
	// one: on time it is just under it (the last commit takes a moment),
	// and it can never be far above it, since jobs are released on schedule.
	require.Positive(t, l.AchievedPerSec, "%s %s", l.System, l.Mode)
	require.NotEqual(t, float64(l.RatePerSec), l.AchievedPerSec)
	require.LessOrEqual(t, l.AchievedPerSec, 1.01*float64(l.RatePerSec))
	require.Zero(t, l.Lost, "%s %s", l.System, l.Mode)
	require.Len(t, l.SamplesMs, l.Count)
	require.Positive(t, l.P50Ms)
	require.LessOrEqual(t, l.P50Ms, l.P90Ms)
	require.LessOrEqual(t, l.P90Ms, l.P99Ms)
	require.LessOrEqual(t, l.P99Ms, l.P999Ms)
	require.LessOrEqual(t, l.P999Ms, l.MaxMs)
}

func TestLatencyAndFloor(t *testing.T) {
	t.Parallel()
	res := tiny(t, suite.ScenarioLatency, suite.ScenarioFloor)
	var got []string
	for _, l := range res.Latency {
		requireOrdered(t, l)
		require.Equal(t, 50, l.RatePerSec)
		got = append(got, l.System+"/"+l.Mode)
	}
	require.Equal(t, []string{"floor/listen", "floor/listen+claim", "fila/notify", "fila/poll-50ms"}, got)

	dir := t.TempDir()
	chart := filepath.Join(dir, "latency.svg")
	require.NoError(t, suite.WriteChart(chart, res, 50))
	svg, err := os.ReadFile(chart)
	require.NoError(t, err)
	require.Contains(t, string(svg), "fila notify")
	require.Contains(t, string(svg), "floor listen+claim")

	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "Pickup latency (ms)")
	require.Contains(t, text.String(), "Fila over the floor")
}

func TestThroughput(t *testing.T) {
	t.Parallel()
	// Long enough a steady run for completions to be written within it on
	// a busy machine.
	res := tinyWith(t, func(o *suite.Options) { o.Duration = time.Second },
		suite.ScenarioDrain, suite.ScenarioSteady, suite.ScenarioSQLFloor)
	require.Len(t, res.Throughput, 4)
	modes := map[string]bench.ThroughputResult{}
	for _, r := range res.Throughput {
		require.Positive(t, r.Jobs, r.Mode)
		require.Positive(t, r.JobsPerSec, r.Mode)
		require.Positive(t, r.Seconds, r.Mode)
		modes[r.Mode] = r
	}
	require.Equal(t, 500, modes[suite.ThroughputDrain].Jobs)
	require.Equal(t, 500, modes[suite.ThroughputDrainTyped].Jobs, "the drain with a typed handler ran too")
	require.Equal(t, 500, modes[suite.ThroughputSQLFloor].Jobs)
	require.Contains(t, modes[suite.ThroughputSteady].Config, "producers")
}

func TestIdle(t *testing.T) {
	t.Parallel()
	// The window follows the workers' start-up, which a loaded machine can
	// stretch into it (a wake source that turns healthy late polls fast
	// meanwhile; a worker and its baseline whose start-ups differ by tens
	// of transactions were seen beside other packages' tests): each row
	// must be within its bound in one of three measurements. A claim loop,
	// or a poll at ten times its interval, exceeds the bound in all.
	//
	// Other databases' NOTIFY traffic runs throughout, as other tests'
	// does on a shared server: the notify worker's listener reads past it
	// in transactions of the worker's database, which the scenario must
	// tell from the worker's own.
	notifyTraffic(t)
	var res *suite.Results
	within := map[string]bool{} // rows seen within their bound
	for attempt := 1; ; attempt++ {
		// Also a notify worker of 300 queues, polling every 2 s: one poll
		// per queue would run about 150 claims in the window, where one
		// statement polls them all.
		res = tinyWith(t, func(o *suite.Options) { o.IdleQueues = []int{300} }, suite.ScenarioIdle)
		require.Len(t, res.Idle, 3)
		over := ""
		for _, x := range res.Idle {
			require.Positive(t, x.Backends, x.Mode)
			row := fmt.Sprintf("%s/%d", x.Mode, x.Queues)
			if x.Seconds <= 0.5 {
				// The window is the difference of two workers' lives, each
				// ending with its stop: one stop slower than the other by
				// half a second on a loaded machine leaves too short a
				// window to judge (0.44 s, beside the race pass's
				// heaviest packages). Measure again.
				t.Logf("attempt %d: %s (%d queues): window %.2f s, not about the 1 s asked for", attempt, x.Mode, max(x.Queues, 1), x.Seconds)
				if !within[row] {
					over += fmt.Sprintf("%s: a window of %.2f s; ", x.Mode, x.Seconds)
				}
				continue
			}
			t.Logf("attempt %d: %s (%d queues): %d transactions in %.2f s (and %d reads of the notification queue), bound %d",
				attempt, x.Mode, max(x.Queues, 1), x.Transactions, x.Seconds, x.QueueReads, report.IdleBound(x))
			// The claim of docs/wake-sources.md: an idle worker costs a query per poll
			// interval and one per listener keep-alive. The slack is the
			// start-up noise the baseline worker does not cancel exactly (a
			// claim that raced the stop), and half the queue reads taken
			// out: a listener slowed by a busy machine reads several
			// signalled commits at once, so two listeners over the same
			// traffic count different reads (notify rows of 4 to 13 over
			// 12 to 22 reads while another package's tests ran; 0 to 3 on
			// a quiet machine).
			if x.Transactions <= int64(report.IdleBound(x)+idleSlack)+x.QueueReads/2 {
				within[row] = true
			} else if !within[row] {
				over += fmt.Sprintf("%s: %d transactions in %.1f s, bound %d; ", x.Mode, x.Transactions, x.Seconds, report.IdleBound(x))
			}
		}
		if over == "" {
			break
		}
		require.Less(t, attempt, 3, "over the bound in three measurements: %s", over)
	}
	require.Equal(t, suite.ModeNotify, res.Idle[1].Mode)
	require.Equal(t, 300, res.Idle[1].Queues)
	// A 50 ms poll claims about 20 times a second; in a second it can
	// hardly claim fewer than a few times.
	require.Equal(t, suite.ModePoll50, res.Idle[2].Mode)
	require.Greater(t, res.Idle[2].Transactions, int64(3))
	// The traffic signals every listener about twenty times a second.
	require.Equal(t, suite.ModeNotify, res.Idle[0].Mode)
	require.Positive(t, res.Idle[0].QueueReads, "the notify worker's listener read other databases' notifications")
	require.Zero(t, res.Idle[2].QueueReads, "a polling worker listens to nothing")
}

// notifyTraffic sends NOTIFYs in a database of its own until the test
// ends: some 70 KB a commit, twenty commits a second. The server keeps one
// notification queue for all databases, and signals every listener that
// falls four pages (32 KB) behind it, so each commit makes every listener
// on the server read past it.
func notifyTraffic(t *testing.T) {
	t.Helper()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var err error
		for ctx.Err() == nil && err == nil {
			_, err = db.Pool.Exec(ctx, `SELECT pg_notify('fila_test_traffic', i || repeat('x', 1000)) FROM generate_series(1, 64) i`)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			err = nil
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done, "notify traffic")
	})
}

// idleSlack is how many transactions over its bound an idle worker's
// window may show from start-up noise on a loaded machine (up to 5 were
// seen). A claim loop runs hundreds a second, and a poll at twice its
// interval twenty more in the 1 s window: either still breaks the bound.
const idleSlack = 8

func TestProducers(t *testing.T) {
	t.Parallel()
	res := tiny(t, suite.ScenarioProducers)
	require.Len(t, res.Producers, 6) // notify-always, notify and no-trigger × 1 and 3 producers
	for _, p := range res.Producers {
		require.Positive(t, p.Commits, "%s ×%d", p.Mode, p.Producers)
		require.Positive(t, p.CommitsPerSec)
		require.LessOrEqual(t, p.P50Ms, p.P99Ms)
		require.LessOrEqual(t, p.P99Ms, p.MaxMs)
	}

	path := filepath.Join(t.TempDir(), "bench.json")
	require.NoError(t, suite.WriteJSON(path, res))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var back map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &back))
	for _, k := range []string{"machine", "latency", "throughput", "idle", "producers"} {
		require.Contains(t, back, k)
	}
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.True(t, strings.Contains(text.String(), "no-trigger commits/s"), text.String())
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []suite.Options{
		{Scenarios: []string{"nope"}},
		{Modes: []string{"push"}},
		{Rates: []int{0}},
		{Duration: time.Millisecond},
		{Workers: -1},
	} {
		require.Error(t, o.WithDefaults().Validate(), "%+v", o)
	}
	require.NoError(t, suite.Options{}.WithDefaults().Validate())
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once; with Throwaway unset, Run must say
	// so rather than start a cluster.
	_, err := suite.Run(ctx, suite.Options{DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Scenarios: []string{suite.ScenarioDrain}})
	require.ErrorContains(t, err, "cannot reach PostgreSQL")
}

func TestThrowawayCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Nothing answers on port 1: with Throwaway set, Run starts a cluster
	// of its own from the installed binaries, runs there and removes it.
	res, err := suite.Run(ctx, suite.Options{
		DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Throwaway: true,
		Scenarios: []string{suite.ScenarioDrain}, DrainJobs: 200, Workers: 10, ClaimBatch: 50,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
	})
	require.NoError(t, err)
	require.Equal(t, "throwaway cluster", res.Server)
	require.Equal(t, "logical", res.Machine.WALLevel)
	require.Len(t, res.Throughput, 2, "the drain, untyped and typed")
	require.Equal(t, 200, res.Throughput[0].Jobs)
}

func TestLatencyWALWithoutTrigger(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) { o.Modes = []string{suite.ModeWAL} }, suite.ScenarioLatency)
	require.Len(t, res.Latency, 1)
	// The insert trigger is off in this run: a worker woken by NOTIFY
	// would find these jobs only at its 30 s safety poll, so every one is
	// picked up within the 5 s window only because the WAL woke it.
	requireOrdered(t, res.Latency[0])
	require.Equal(t, suite.ModeWAL, res.Latency[0].Mode)
}

func TestGoalsWithoutAndWithPeers(t *testing.T) {
	t.Parallel()
	res := &suite.Results{
		Peers: "not measured: run with --peers",
		Latency: []bench.LatencyResult{
			{System: "floor", Mode: suite.FloorListenClaim, RatePerSec: 100, Count: 400, P50Ms: 2, P99Ms: 5},
			{System: "fila", Mode: suite.ModeNotify, RatePerSec: 100, Count: 400, P50Ms: 2.1, P99Ms: 9},
			{System: "fila", Mode: suite.ModeWAL, RatePerSec: 1000, Count: 4000, AchievedPerSec: 930, P50Ms: 4, P99Ms: 9},
		},
		Throughput: []bench.ThroughputResult{
			{System: "fila", Mode: suite.ThroughputDrain, JobsPerSec: 12000},
			{System: "fila", Mode: suite.ThroughputSQLFloor, JobsPerSec: 30000},
		},
	}
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	out := text.String()
	require.NotContains(t, out, "6.8", "no figure from another run")
	require.Contains(t, out, "notify p50 at 100/s ≤ the best peer's: not measured")
	require.Contains(t, out, "notify p99 at 100/s ≤ the best peer's: not measured")
	require.Contains(t, out, "drain ≥ 2.0× the best peer's best tuned drain: not measured")
	require.Contains(t, out, "notify p50 at 10/s ≤ 1.1× the listen+claim floor's: not measured")
	// Against the floor and the SQL floor, always computable, with margins.
	require.Contains(t, out, "notify p50 at 100/s ≤ 1.1× the listen+claim floor's: met (2.10 ms vs floor 2.00 ms, 1.05×; margin +4.5%)")
	require.Contains(t, out, "drain ≥ 80% of the raw SQL floor: MISSED (12000/s vs 30000/s, 0.40×; margin -50%)")
	require.Contains(t, out, "producers at 1000 single-job commits/s reach ≥ 95% of it (fila wal): MISSED (930/s, 93.0%; margin -2.1%)")

	// The same run with the peers measured in it: each goal compares with
	// the best of them.
	res.Peers = "river, graphile-worker, pg-boss, run by bench/peers rate by rate right after Fila's rows"
	res.Latency = append(res.Latency,
		bench.LatencyResult{System: "river", Mode: "default", RatePerSec: 100, Count: 400, P50Ms: 50, P99Ms: 100},
		bench.LatencyResult{System: "river", Mode: "tuned-10ms", RatePerSec: 100, Count: 400, P50Ms: 4.8, P99Ms: 7.2},
		bench.LatencyResult{System: "graphile-worker", Mode: "tuned-24c-lq500", RatePerSec: 100, Count: 400, P50Ms: 1.9, P99Ms: 8},
		bench.LatencyResult{System: "pg-boss", Mode: "tuned-10w-b100-500ms", RatePerSec: 1000, Count: 4000, P50Ms: 260, P99Ms: 500},
		bench.LatencyResult{System: "river", Mode: "tuned-10ms", RatePerSec: 1000, Count: 4000, P50Ms: 5, P99Ms: 20})
	res.Throughput = append(res.Throughput,
		bench.ThroughputResult{System: "river", Mode: "tuned-500w-1ms", JobsPerSec: 7000},
		bench.ThroughputResult{System: "pg-boss", Mode: "tuned-10w-b1000-500ms", JobsPerSec: 5000},
		bench.ThroughputResult{System: "river", Mode: "tuned-1000w-1ms", JobsPerSec: 9000})
	text.Reset()
	require.NoError(t, suite.WriteText(&text, res))
	out = text.String()
	require.Contains(t, out, "notify p50 at 100/s ≤ the best peer's: MISSED (2.10 ms vs graphile-worker tuned-24c-lq500 1.90 ms, 1.11×")
	require.Contains(t, out, "notify p99 at 100/s ≤ the best peer's: MISSED (9.00 ms vs river tuned-10ms 7.20 ms, 1.25×")
	require.Contains(t, out, "wal p50 at 1000/s ≤ the best peer's: met (4.00 ms vs river tuned-10ms 5.00 ms, 0.80×; margin +20%)")
	// The best of every peer's tuned drains, not a default or the first found.
	require.Contains(t, out, "drain ≥ 2.0× the best peer's best tuned drain: MISSED (12000/s vs river tuned-1000w-1ms 9000/s, 1.33×")
	// No peer row at 10/s: that goal stays unmeasured rather than borrowed.
	require.Contains(t, out, "notify p50 at 10/s ≤ the best peer's: not measured")

	path := filepath.Join(t.TempDir(), "bench.json")
	require.NoError(t, suite.WriteJSON(path, res))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var back suite.Results
	require.NoError(t, json.Unmarshal(b, &back))
	require.NotEmpty(t, back.Goals)
	require.Equal(t, report.GoalMissed, back.Goals[1].Status, back.Goals[1].Target)
	require.NotNil(t, back.Goals[1].Margin)
}

// fakePeers is a bench/peers stand-in: it appends its --scenarios and
// --rates to calls.log beside it and writes one row per rate (latency) or
// one drain row, as bench/peers' JSON has them.
const fakePeers = `package main

import (
	"encoding/json"
	"flag"
	"os"
	"strconv"
	"strings"
)

func main() {
	scenarios := flag.String("scenarios", "", "")
	rates := flag.String("rates", "", "")
	out := flag.String("json", "", "")
	flag.String("systems", "", "")
	flag.String("duration", "", "")
	flag.String("min-samples", "", "")
	flag.String("drain-jobs", "", "")
	flag.String("dsn", "", "")
	flag.Bool("with-fila", true, "")
	flag.Parse()
	log, _ := os.OpenFile("calls.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	log.WriteString(*scenarios + " " + *rates + "\n")
	log.Close()
	res := map[string][]map[string]any{"latency": {}, "throughput": {}}
	if *scenarios == "latency" {
		for _, r := range strings.Split(*rates, ",") {
			n, _ := strconv.Atoi(r)
			res["latency"] = append(res["latency"], map[string]any{"system": "river", "mode": "tuned", "rate_per_sec": n, "count": 10, "p50_ms": 1.0})
		}
	} else {
		res["throughput"] = append(res["throughput"], map[string]any{"system": "river", "mode": "drain", "jobs": 10, "jobs_per_sec": 100.0})
	}
	b, _ := json.Marshal(res)
	os.WriteFile(*out, b, 0o644)
}
`

// TestPeersInterleaved: the peers' rows of each rate are taken right
// after Fila's rows of that rate, and their drain right after Fila's, not
// all of them after every Fila scenario.
func TestPeersInterleaved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fakepeers\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(fakePeers), 0o644))
	res := tinyWith(t, func(o *suite.Options) {
		o.PeersDir = dir
		o.Rates = []int{40, 60}
		o.Modes = []string{suite.ModeNotify}
	}, suite.ScenarioLatency, suite.ScenarioDrain)
	calls, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	require.NoError(t, err)
	require.Equal(t, "latency 40\nlatency 60\ndrain \n", string(calls), "one call per rate, then the drain")
	require.Contains(t, res.Peers, "rate by rate right after Fila's rows")
	var systems []string
	for _, r := range res.Latency {
		systems = append(systems, fmt.Sprintf("%s@%d", r.System, r.RatePerSec))
	}
	require.Equal(t, []string{"fila@40", "river@40", "fila@60", "river@60"}, systems, "rows in the order they were taken")
	require.Equal(t, "river", res.Throughput[len(res.Throughput)-1].System, "the peers' drain after Fila's")
}

func TestPeersMissing(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) { o.PeersDir = filepath.Join(t.TempDir(), "nowhere") }, suite.ScenarioDrain)
	require.Contains(t, res.Peers, "not measured: no bench/peers module at")
	for _, g := range res.Goals {
		if strings.Contains(g.Target, "peer") {
			require.Equal(t, report.GoalNotMeasured, g.Status, g.Target)
		}
	}
}

func TestSoak(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) {
		o.SoakDuration, o.SoakWindow, o.SoakRate, o.SoakRetention = 3*time.Second, time.Second, 300, time.Second
	}, suite.ScenarioSoak)
	s := res.Soak
	require.NotNil(t, s)
	require.Equal(t, 300, s.RatePerSec)
	require.Len(t, s.Windows, 3, "one row per window")
	require.Positive(t, s.Inserted)
	require.Zero(t, s.Lost)
	picked := 0
	for i, w := range s.Windows {
		require.InDelta(t, float64(i+1), w.EndSec, 1e-9)
		require.Positive(t, w.PickedUp, "window %d", i)
		require.Positive(t, w.InsertedPerSec, "window %d", i)
		require.Positive(t, w.P50Ms, "window %d", i)
		require.LessOrEqual(t, w.P50Ms, w.P99Ms, "window %d", i)
		// Sizes come from the database: whole 8 kB pages, the indexes part
		// of the total, and a table that holds jobs larger than an empty one.
		require.Zero(t, w.TableBytes%8192, "window %d: %d bytes", i, w.TableBytes)
		require.Zero(t, w.IndexBytes%8192, "window %d: %d bytes", i, w.IndexBytes)
		require.Greater(t, w.TableBytes, w.IndexBytes, "window %d", i)
		picked += w.PickedUp
	}
	require.GreaterOrEqual(t, s.Windows[2].TableBytes, s.Windows[0].TableBytes, "nothing is old enough to delete yet")
	// Every pick-up in the windows is of a job committed in them.
	require.LessOrEqual(t, picked, s.Inserted)

	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "Soak: fila notify (Concurrency=20 ClaimBatch=100, Retention 1s), producers asked 300 jobs/s for 3s")
	require.Regexp(t, `soak: table size within 2× the first window's: (met|MISSED)`, text.String())
	require.Regexp(t, `soak: p99 flat \(last window ≤ 1.5× the first\): (met|MISSED)`, text.String())
}

func TestBigTable(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) {
		o.BigTableCompleted, o.BigTableScheduled, o.BigTableRate = 2000, 3000, 50
	}, suite.ScenarioBigTable)
	b := res.BigTable
	require.NotNil(t, b)
	// Counted in the table after seeding, not copied from the options.
	require.Equal(t, int64(2000), b.Completed)
	require.Equal(t, int64(3000), b.Scheduled)
	require.Positive(t, b.SeedSeconds)
	require.Zero(t, b.TableBytes%8192)
	// 5000 rows with their indexes take more than a few pages.
	require.Greater(t, b.TableBytes, int64(64*8192))
	for _, l := range []bench.LatencyResult{b.Empty, b.Big} {
		requireOrdered(t, l)
		require.Equal(t, 50, l.RatePerSec)
	}
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Regexp(t, `pickup p50 with 2000 completed and 3000 future-scheduled rows ≤ 1.2× the empty table's: (met|MISSED)`, text.String())
}

func TestBulk(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) { o.BulkJobs = 3000 }, suite.ScenarioBulk)
	b := res.Bulk
	require.NotNil(t, b)
	require.Equal(t, 3000, b.Jobs)
	require.Positive(t, b.InsertManySec)
	require.Positive(t, b.CopySec)
	require.InDelta(t, 3000/b.InsertManySec, b.InsertManyPerSec, 1e-6)
	require.InDelta(t, 3000/b.CopySec, b.CopyPerSec, 1e-6)
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "runtime.InsertMany, one call")
	require.Contains(t, text.String(), "COPY (pgx CopyFrom), the floor")
}

// TestLatencyMinSamples: a run at a rate too low for Duration to give
// MinSamples pickups inserts MinSamples jobs all the same.
func TestLatencyMinSamples(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) {
		o.Modes, o.Rates, o.MinSamples = []string{suite.ModeNotify}, []int{100}, 60
	}, suite.ScenarioLatency)
	require.Len(t, res.Latency, 1)
	require.Equal(t, 60, res.Latency[0].Count, "300 ms at 100/s is 30 jobs; MinSamples asks for 60")
}

func TestBreakdown(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) { o.Duration = time.Second }, suite.ScenarioBreakdown)
	require.Len(t, res.Breakdown, 2)
	fila, floor := res.Breakdown[0], res.Breakdown[1]
	require.Equal(t, "fila", fila.System)
	require.Equal(t, "floor", floor.System)
	require.Len(t, fila.Steps, 5)
	require.Len(t, floor.Steps, 3)
	for _, x := range res.Breakdown {
		require.Equal(t, 10, x.Jobs, x.System)
		// At 10/s each job is alone, and on a quiet machine nearly every one
		// is traced; on a loaded one a job can be taken by a claim that does
		// not name it (3 of 10 were traced beside the race pass): some must be.
		require.Positive(t, x.Traced, x.System)
		// The steps are consecutive intervals of one clock: their means add
		// up to the whole pickup's.
		sum := 0.0
		for _, st := range x.Steps {
			sum += st.MeanMs
		}
		require.InDelta(t, x.TracedMeanMs, sum, 1e-6, x.System)
		require.Positive(t, x.TracedP50Ms, x.System)
	}
	require.Positive(t, fila.BareRoundTripMs)
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "Where a pickup's time goes: fila notify at 10/s")
	require.Contains(t, text.String(), "claim reply → handler's first line")
}

// TestExec drains --exec jobs with a real `fila work` process of the
// binary built from this tree, next to xargs, and checks both were
// measured, with the worker's CPU read from /proc.
func TestExec(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "fila")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fila-run/fila/cmd/fila").CombinedOutput()
	require.NoError(t, err, "%s", out)
	res := tinyWith(t, func(o *suite.Options) { o.ExecJobs = 200; o.FilaBin = bin }, suite.ScenarioExec)
	x := res.Exec
	require.NotNil(t, x)
	require.Equal(t, 200, x.Jobs)
	require.Equal(t, suite.ExecConcurrency, x.Concurrency)
	require.Positive(t, x.FilaSec)
	require.Positive(t, x.XargsSec)
	require.InDelta(t, 200/x.FilaSec, x.FilaPerSec, 1e-6)
	// The worker and its guards do work of their own for each attempt. The
	// commands' CPU is what the guards collect from their children, which
	// /proc gives each guard in whole 10 ms ticks: 200 runs of sh -c true
	// spread over the guards can round to none, so it is only never
	// negative here (the exec scenario's 1 000-job rounds show it).
	require.GreaterOrEqual(t, x.FilaCommandCPUUs, 0.0)
	require.Positive(t, x.FilaOverheadCPUUs)
	require.Positive(t, x.XargsCPUUs)
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "xargs -P 32 sh -c true, the floor")
	require.Regexp(t, `--exec true drains ≥ 0.6× the speed of xargs -P sh -c true at the same concurrency: (met|MISSED)`, text.String())
}

// TestInsertCost opens fresh sessions on the shared server, and on a
// throwaway cluster that preloads PL/pgSQL when the shared one does not,
// and times their first and second inserts.
func TestInsertCost(t *testing.T) {
	t.Parallel()
	res := tinyWith(t, func(o *suite.Options) { o.InsertSessions = 3 }, suite.ScenarioInsert)
	require.NotEmpty(t, res.InsertCost)
	var libs string
	conn, err := pgx.Connect(context.Background(), testdb.AdminURL())
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(context.Background(), "SHOW shared_preload_libraries").Scan(&libs))
	require.NoError(t, conn.Close(context.Background()))
	given := res.InsertCost[0]
	require.Equal(t, "as given", given.Server)
	require.Equal(t, strings.Contains(libs, "plpgsql"), given.PLpgSQLPreloaded)
	if given.PLpgSQLPreloaded {
		require.Len(t, res.InsertCost, 1, "a preloading server needs no second row")
	} else {
		require.Len(t, res.InsertCost, 2)
		require.True(t, res.InsertCost[1].PLpgSQLPreloaded, "the throwaway cluster preloads PL/pgSQL")
	}
	for _, x := range res.InsertCost {
		require.Equal(t, 3, x.Sessions)
		for _, v := range []float64{x.PlainColdP50Ms, x.PlainWarmP50Ms, x.FilaColdP50Ms, x.FilaWarmP50Ms, x.InsertColdP50Ms, x.InsertWarmP50Ms} {
			require.Positive(t, v, "%+v", x)
		}
	}
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "plain table, same columns (the floor)")
	require.Regexp(t, `a fresh session's first insert into fila_jobs ≤ 2.0× a plain table's: (met|MISSED)`, text.String())
}

// TestExecWithoutBinary: with no fila binary to run, the exec scenario
// says it was skipped rather than failing or pretending.
func TestExecWithoutBinary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := suite.Run(ctx, suite.Options{DSN: testdb.AdminURL(), Scenarios: []string{suite.ScenarioExec}})
	require.NoError(t, err)
	require.Nil(t, res.Exec)
	require.Contains(t, strings.Join(res.Notes, "\n"), "exec: skipped: no fila binary to run")
}
