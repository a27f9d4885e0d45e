package report_test

import (
	"math"
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
