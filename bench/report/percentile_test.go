package report_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

func TestPercentilesEmpty(t *testing.T) {
	t.Parallel()
	p50, p90, p99, p999, maximum := report.Percentiles(nil)
	require.Equal(t, []float64{0, 0, 0, 0, 0}, []float64{p50, p90, p99, p999, maximum})
}

func TestPercentilesOneSample(t *testing.T) {
	t.Parallel()
	p50, p90, p99, p999, maximum := report.Percentiles([]float64{4.2})
	require.Equal(t, []float64{4.2, 4.2, 4.2, 4.2, 4.2}, []float64{p50, p90, p99, p999, maximum})
}

func TestPercentilesThousand(t *testing.T) {
	t.Parallel()
	// 1..1000 shuffled: the p-th percentile by nearest rank is exactly 10p.
	samples := make([]float64, 1000)
	for i := range samples {
		samples[i] = float64(i + 1)
	}
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(samples), func(i, j int) {
		samples[i], samples[j] = samples[j], samples[i]
	})
	before := slices.Clone(samples)

	p50, p90, p99, p999, maximum := report.Percentiles(samples)
	require.Equal(t, []float64{500, 900, 990, 999, 1000}, []float64{p50, p90, p99, p999, maximum})
	require.Equal(t, before, samples, "input must not be reordered")
}

func TestPercentilesNearestRankRoundsUp(t *testing.T) {
	t.Parallel()
	// n=3: p50 is rank ceil(1.5)=2, p90 and above are rank 3.
	p50, p90, p99, p999, maximum := report.Percentiles([]float64{30, 10, 20})
	require.Equal(t, []float64{20, 30, 30, 30, 30}, []float64{p50, p90, p99, p999, maximum})
}

func TestFill(t *testing.T) {
	t.Parallel()
	r := bench.LatencyResult{Count: 10, SamplesMs: []float64{5, 1, 4, 2, 3, 9, 8, 7, 6, 10}}
	report.Fill(&r)
	require.Equal(t, 5.0, r.P50Ms)
	require.Equal(t, 9.0, r.P90Ms)
	require.Equal(t, 10.0, r.P99Ms)
	require.Equal(t, 10.0, r.P999Ms)
	require.Equal(t, 10.0, r.MaxMs)
	require.Equal(t, 10, r.Count, "Fill leaves Count alone")
}
