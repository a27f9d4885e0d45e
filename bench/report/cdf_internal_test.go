package report

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func tickLabels(a logAxis) (all, labelled []string) {
	for _, t := range a.ticks {
		all = append(all, t.label)
		if t.labelled {
			labelled = append(labelled, t.label)
		}
	}
	return all, labelled
}

func TestLogAxisTicks(t *testing.T) {
	t.Parallel()
	// Data from 0.15 to 2000 ms: the axis runs from the 1-2-5 value below
	// the minimum to the one above the maximum, and at this density (under
	// five decades on 700 px) the 2s and 5s are labelled too.
	a := newLogAxis(0.15, 2000, 0, 700)
	all, labelled := tickLabels(a)
	want := []string{"0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "2000"}
	require.Equal(t, want, all)
	require.Equal(t, want, labelled)

	// Positions are logarithmic: each decade is the same width, 2 sits at
	// log10(2) ≈ 30.1% of a decade and 5 at 69.9%.
	decade := 700 / 4.30103 // log10(2000/0.1)
	require.InDelta(t, 0, a.x(0.1), 1e-9)
	require.InDelta(t, decade, a.x(1), 1e-6)
	require.InDelta(t, 2*decade, a.x(10), 1e-6)
	require.InDelta(t, decade*1.30103, a.x(2), 1e-3)
	require.InDelta(t, decade*1.69897, a.x(5), 1e-3)
	require.InDelta(t, 700, a.x(2000), 1e-9)

	// Values off the axis are clamped to its ends.
	require.Equal(t, 0.0, a.x(0))
	require.Equal(t, 0.0, a.x(-1))
	require.Equal(t, 700.0, a.x(1e9))
}

func TestLogAxisWideSpanLabelsDecadesOnly(t *testing.T) {
	t.Parallel()
	// 0.01 ms to 60 s is seven decades: 2 and 5 keep their gridlines but
	// lose their labels, which would overlap.
	a := newLogAxis(0.012, 60_000, 0, 700)
	all, labelled := tickLabels(a)
	require.Equal(t, "0.01", all[0])
	require.Equal(t, "100000", all[len(all)-1])
	require.Equal(t, []string{"0.01", "0.1", "1", "10", "100", "1000", "10000", "100000"}, labelled)
}

func TestLogAxisNarrowDataSpansADecade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		min, max float64
		want     []string
	}{
		{3, 3, []string{"1", "2", "5", "10"}},
		{1, 1, []string{"0.2", "0.5", "1", "2", "5"}},
		{0.3, 0.4, []string{"0.1", "0.2", "0.5", "1"}},
		{100, 100, []string{"20", "50", "100", "200", "500"}},
	} {
		a := newLogAxis(tc.min, tc.max, 0, 700)
		all, _ := tickLabels(a)
		require.Equal(t, tc.want, all, "axis for [%v, %v]", tc.min, tc.max)
		require.GreaterOrEqual(t, a.hi.value()/a.lo.value(), 9.99)
	}
}

func TestFloorCeil125(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v           float64
		floor, ceil string
	}{
		{1, "1", "1"},
		{0.1, "0.1", "0.1"},
		{0.3, "0.2", "0.5"},
		{1000, "1000", "1000"},
		{999.9, "500", "1000"},
		{7, "5", "10"},
		{0.0042, "0.002", "0.005"},
		{123456, "100000", "200000"},
	} {
		require.Equal(t, tc.floor, floor125(tc.v).label(), "floor125(%v)", tc.v)
		require.Equal(t, tc.ceil, ceil125(tc.v).label(), "ceil125(%v)", tc.v)
	}
}
