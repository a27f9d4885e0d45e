package report_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{
		0:                 "0 B",
		1023:              "1023 B",
		8192:              "8.00 kB",
		46_300_000:        "44.2 MB",
		390 * 1024 * 1024: "390 MB",
		3 << 40:           "3.00 TB",
	} {
		require.Equal(t, want, report.FormatBytes(in), "FormatBytes(%d)", in)
	}
}

func TestSoakVerdicts(t *testing.T) {
	t.Parallel()
	s := &bench.SoakResult{Windows: []bench.SoakWindow{
		{TableBytes: 100, P99Ms: 10}, {TableBytes: 190, P99Ms: 30}, {TableBytes: 150, P99Ms: 14},
	}}
	ok, worst := report.SoakSizeOK(s)
	require.True(t, ok)
	require.InDelta(t, 1.9, worst, 1e-9, "the largest window, not the last")
	ok, ratio := report.SoakP99Flat(s)
	require.True(t, ok, "the last window against the first: 1.4×")
	require.InDelta(t, 1.4, ratio, 1e-9)

	s.Windows = append(s.Windows, bench.SoakWindow{TableBytes: 201, P99Ms: 16})
	ok, _ = report.SoakSizeOK(s)
	require.False(t, ok)
	ok, _ = report.SoakP99Flat(s)
	require.False(t, ok)

	// A first window with no pick-ups gives no baseline to be flat against.
	s.Windows[0].P99Ms = 0
	ok, ratio = report.SoakP99Flat(s)
	require.False(t, ok)
	require.True(t, math.IsNaN(ratio))
}

func TestGoalsNeedTheirRows(t *testing.T) {
	t.Parallel()
	gs := report.Goals(report.GoalInput{})
	require.NotEmpty(t, gs)
	for _, g := range gs {
		require.Equal(t, report.GoalNotMeasured, g.Status, g.Target)
		require.NotEmpty(t, g.Detail, g.Target)
	}
	// A row with no jobs counted is no measurement either.
	gs = report.Goals(report.GoalInput{Latency: []bench.LatencyResult{
		{System: "fila", Mode: "notify", RatePerSec: 10},
		{System: "floor", Mode: "listen+claim", RatePerSec: 10},
	}})
	require.Equal(t, report.GoalNotMeasured, gs[2].Status, gs[2].Target)
}

func goalOf(t *testing.T, gs []report.Goal, target string) report.Goal {
	t.Helper()
	for _, g := range gs {
		if g.Target == target {
			return g
		}
	}
	t.Fatalf("no goal %q in %v", target, gs)
	return report.Goal{}
}

func TestGoalsAgainstTheBestPeer(t *testing.T) {
	t.Parallel()
	lat := []bench.LatencyResult{
		{System: "fila", Mode: "notify", RatePerSec: 10, Count: 200, P50Ms: 1.5, P99Ms: 4},
		{System: "floor", Mode: "listen+claim", RatePerSec: 10, Count: 200, P50Ms: 1.25, P99Ms: 3},
		// The best peer at 10/s is graphile-worker's, whatever the system.
		{System: "river", Mode: "tuned-10ms", RatePerSec: 10, Count: 200, P50Ms: 1.6, P99Ms: 100},
		{System: "graphile-worker", Mode: "tuned-24c-lq500", RatePerSec: 10, Count: 200, P50Ms: 1.4, P99Ms: 3},
		// A default that lost jobs did not keep up: not a peer's best.
		{System: "pg-boss", Mode: "default", RatePerSec: 10, Count: 200, Lost: 150, P50Ms: 0.5, P99Ms: 1},
		{System: "fila", Mode: "notify", RatePerSec: 100, Count: 400, P50Ms: 1.2, P99Ms: 2},
		{System: "river", Mode: "default", RatePerSec: 100, Count: 400, P50Ms: 1.8, P99Ms: 2.5},
		// Too few pickups to decide.
		{System: "fila", Mode: "wal", RatePerSec: 1000, Count: 150, AchievedPerSec: 990, P50Ms: 2, P99Ms: 5},
		{System: "river", Mode: "tuned-10ms", RatePerSec: 1000, Count: 4000, P50Ms: 7, P99Ms: 15},
	}
	thr := []bench.ThroughputResult{
		{System: "fila", Mode: "drain", JobsPerSec: 40000},
		{System: "fila", Mode: "sql-floor", JobsPerSec: 50000},
		{System: "river", Mode: "tuned-1000w-1ms", JobsPerSec: 15000},
		{System: "graphile-worker", Mode: "tuned-24c-lq500", JobsPerSec: 22000},
		{System: "graphile-worker", Mode: "default", JobsPerSec: 90000}, // untuned rows are not the bar
	}
	gs := report.Goals(report.GoalInput{Latency: lat, Throughput: thr})

	g := goalOf(t, gs, "notify p50 at 10/s ≤ the best peer's")
	require.Equal(t, report.GoalMissed, g.Status)
	require.Equal(t, "1.50 ms vs graphile-worker tuned-24c-lq500 1.40 ms, 1.07×", g.Detail)
	require.NotNil(t, g.Margin)
	require.InDelta(t, (1.4-1.5)/1.4, *g.Margin, 1e-9)

	g = goalOf(t, gs, "notify p50 at 10/s ≤ 1.1× the listen+claim floor's")
	require.Equal(t, report.GoalMissed, g.Status, "1.5 > 1.1 × 1.25")
	require.InDelta(t, (1.375-1.5)/1.375, *g.Margin, 1e-9)

	// A peer's default counts when it is the best there is.
	g = goalOf(t, gs, "notify p99 at 100/s ≤ the best peer's")
	require.Equal(t, report.GoalMet, g.Status)
	require.Contains(t, g.Detail, "river default 2.50 ms")
	require.InDelta(t, 0.2, *g.Margin, 1e-9)

	g = goalOf(t, gs, "wal p50 at 1000/s ≤ the best peer's")
	require.Equal(t, report.GoalNotMeasured, g.Status)
	require.Contains(t, g.Detail, "fila wal at 1000/s has 150 pickups, fewer than the 200")
	require.Nil(t, g.Margin)

	g = goalOf(t, gs, "drain ≥ 2.0× the best peer's best tuned drain")
	require.Equal(t, report.GoalMissed, g.Status)
	require.Equal(t, "40000/s vs graphile-worker tuned-24c-lq500 22000/s, 1.82×", g.Detail)
	require.InDelta(t, (40000.0-44000)/44000, *g.Margin, 1e-9)

	g = goalOf(t, gs, "drain ≥ 80% of the raw SQL floor")
	require.Equal(t, report.GoalMet, g.Status)
	require.InDelta(t, 0, *g.Margin, 1e-9)

	var b strings.Builder
	require.NoError(t, report.WriteGoals(&b, gs))
	require.Contains(t, b.String(), "- drain ≥ 80% of the raw SQL floor: met (40000/s vs 50000/s, 0.80×; margin +0.0%)\n")
	require.Contains(t, b.String(), "- notify p50 at 10/s ≤ the best peer's: MISSED (1.50 ms vs graphile-worker tuned-24c-lq500 1.40 ms, 1.07×; margin -7.1%)\n")
}

// The drain's Go CPU per job is judged on a drain long enough to stand for
// the steady cost, with the collector's share shown.
func TestDrainCPUGoal(t *testing.T) {
	t.Parallel()
	const target = "Go CPU of a 100000-job drain ≤ 4 µs a job"
	drain := func(jobs int, cpuMs float64) report.GoalInput {
		return report.GoalInput{Throughput: []bench.ThroughputResult{{System: bench.SystemFila, Mode: bench.ThroughputDrain,
			Jobs: jobs, JobsPerSec: 30000, GoCPUMs: cpuMs, GoGCCPUMs: cpuMs / 10}}}
	}
	g := goalOf(t, report.Goals(drain(100000, 972)), target)
	require.Equal(t, report.GoalMissed, g.Status)
	require.Equal(t, "9.7 µs a job (garbage collector 1.0)", g.Detail)
	require.InDelta(t, (4-9.72)/4, *g.Margin, 1e-9)

	g = goalOf(t, report.Goals(drain(200000, 700)), target)
	require.Equal(t, report.GoalMet, g.Status)

	g = goalOf(t, report.Goals(drain(20000, 100)), target)
	require.Equal(t, report.GoalNotMeasured, g.Status)
	require.Contains(t, g.Detail, "--drain-jobs 100000")
	require.Nil(t, g.Margin)
}

func TestFormatMargin(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0.1234: "+12%", -0.035: "-3.5%", 0: "+0.0%", 1.5: "+150%"} {
		require.Equal(t, want, report.FormatMargin(in), "%v", in)
	}
}

// TestInsertColdGoal judges the server as given, whatever a preloading
// server's row says, and names both rows.
func TestInsertColdGoal(t *testing.T) {
	t.Parallel()
	const target = "a fresh session's first insert into fila_jobs ≤ 2.0× a plain table's"
	given := bench.InsertCostResult{Server: "as given", PlainColdP50Ms: 5, FilaColdP50Ms: 11}
	preloaded := bench.InsertCostResult{Server: "preloading", PLpgSQLPreloaded: true, PlainColdP50Ms: 5, FilaColdP50Ms: 9}

	g := goalOf(t, report.Goals(report.GoalInput{InsertCost: []bench.InsertCostResult{given, preloaded}}), target)
	require.Equal(t, report.GoalMissed, g.Status, "11 ms is more than 2× 5 ms")
	require.InDelta(t, -0.1, *g.Margin, 1e-9)
	require.Contains(t, g.Detail, "as given (PL/pgSQL loaded per session): 11.00 ms vs 5.00 ms, 2.20×")
	require.Contains(t, g.Detail, "preloading (PL/pgSQL preloaded): 9.00 ms vs 5.00 ms, 1.80×")

	given.FilaColdP50Ms = 10
	g = goalOf(t, report.Goals(report.GoalInput{InsertCost: []bench.InsertCostResult{given}}), target)
	require.Equal(t, report.GoalMet, g.Status, "exactly 2× is within")

	g = goalOf(t, report.Goals(report.GoalInput{InsertCost: []bench.InsertCostResult{{Server: "as given"}}}), target)
	require.Equal(t, report.GoalNotMeasured, g.Status, "a row with no plain figure measured nothing")
}
