package report

import (
	"math"
	"slices"

	"github.com/fila-run/fila/bench"
)

// Percentiles returns the 50th, 90th, 99th and 99.9th percentiles and the
// maximum of samples, by the nearest-rank method: the p-th percentile is the
// smallest sample with at least p% of all samples at or below it, that is the
// sample at 1-based rank ceil(p/100 × n) in sorted order. Nearest rank always
// returns a latency that was actually observed, never an interpolation
// between two, and with n=1 every percentile is that one sample.
//
// samples is not modified (it is copied before sorting). An empty slice
// gives all zeros.
func Percentiles(samples []float64) (p50, p90, p99, p999, maximum float64) {
	if len(samples) == 0 {
		return 0, 0, 0, 0, 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return nearestRank(s, 50), nearestRank(s, 90), nearestRank(s, 99), nearestRank(s, 99.9), s[len(s)-1]
}

// nearestRank returns the p-th percentile of sorted, which must not be empty.
func nearestRank(sorted []float64, p float64) float64 {
	n := len(sorted)
	// p/100*n in floating point can land a hair above an integer (99.9% of
	// 1000 is 999.0000000000001), which ceil would push one rank too far;
	// rounding to 1e-9 first removes that noise.
	rank := int(math.Ceil(math.Round(p/100*float64(n)*1e9) / 1e9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Fill sets r's percentile fields from r.SamplesMs, so a scenario only has to
// record its samples.
func Fill(r *bench.LatencyResult) {
	r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs = Percentiles(r.SamplesMs)
}
