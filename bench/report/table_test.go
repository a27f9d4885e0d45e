package report_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

func TestTableWrite(t *testing.T) {
	t.Parallel()
	tbl := report.Table{
		Title:      "Idle cost",
		Header:     []string{"system", "queries/s", "vs fila"},
		AlignRight: []bool{false, true, true},
		Rows: [][]string{
			{"fila", "0.2", "—"},
			{"river-default", "12.5", "62.5×"},
			{"gue"}, // short rows are padded
		},
	}
	var b bytes.Buffer
	require.NoError(t, tbl.Write(&b))
	require.Equal(t, ""+
		"Idle cost\n"+
		"system         queries/s  vs fila\n"+
		"-------------  ---------  -------\n"+
		"fila                 0.2        —\n"+
		"river-default       12.5    62.5×\n"+
		"gue\n", b.String())
}

func TestTableWriteNoTitleNoHeader(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, report.Table{Rows: [][]string{{"a", "1"}, {"bbb", "22"}}}.Write(&b))
	require.Equal(t, "a    1\nbbb  22\n", b.String())
}

func TestLatencyTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, report.LatencyTable(&b, []bench.LatencyResult{
		{System: "fila", Mode: "notify", RatePerSec: 1000, AchievedPerSec: 987.6, Count: 60000, P50Ms: 0.8123, P90Ms: 1.234, P99Ms: 3.456, P999Ms: 12.34, MaxMs: 104.6},
		{System: "river", Mode: "default", RatePerSec: 100, Count: 6000, Lost: 2, P50Ms: 512, P90Ms: 901.2, P99Ms: 990, P999Ms: 999.94, MaxMs: 1503},
	}))
	require.Equal(t, ""+
		"Pickup latency (ms)\n"+
		"system  mode     rate/s  reached/s  count  lost   p50   p90   p99  p99.9   max\n"+
		"------  -------  ------  ---------  -----  ----  ----  ----  ----  -----  ----\n"+
		"fila    notify     1000        988  60000     0  0.81  1.23  3.46   12.3   105\n"+
		"river   default     100          —   6000     2   512   901   990   1000  1503\n", b.String())
}

func TestThroughputTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, report.ThroughputTable(&b, []bench.ThroughputResult{
		{System: "fila", Mode: "drain", Workers: 16, Jobs: 100000, Seconds: 7.123, JobsPerSec: 14038.9},
		{System: "gue", Mode: "steady", Workers: 4, Jobs: 500, Seconds: 60, JobsPerSec: 8.333},
	}))
	require.Equal(t, ""+
		"Throughput\n"+
		"system  mode    workers    jobs  seconds  jobs/s\n"+
		"------  ------  -------  ------  -------  ------\n"+
		"fila    drain        16  100000     7.12   14039\n"+
		"gue     steady        4     500     60.0    8.33\n", b.String())
}

func TestFormatMs(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{
		0:          "0.00",
		0.004:      "0.00",
		0.426:      "0.43",
		9.994:      "9.99",
		9.996:      "10.0", // the precision follows the rounded value
		12.345:     "12.3",
		99.94:      "99.9",
		99.96:      "100",
		1250.4:     "1250",
		-3.14159:   "-3.14",
		math.NaN(): "—",
	} {
		require.Equal(t, want, report.FormatMs(in), "FormatMs(%v)", in)
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1.23×", report.Ratio(1.234, 1))
	require.Equal(t, "62.5×", report.Ratio(125, 2))
	require.Equal(t, "0.50×", report.Ratio(1, 2))
	require.Equal(t, "—", report.Ratio(1, 0))
	require.Equal(t, "—", report.Ratio(0, 0))
}
