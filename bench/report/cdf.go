package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one named set of latency samples drawn as one curve.
type Series struct {
	Name      string
	SamplesMs []float64
}

// Chart geometry, in SVG user units (pixels at 100% zoom). The plot is wide
// rather than tall because a log x axis spans several decades while y only
// runs from 0 to 1.
const (
	chartWidth   = 800
	plotLeft     = 64
	plotRight    = chartWidth - 48 // room for the p50/p90/p99 labels
	plotTop      = 48
	plotBottom   = plotTop + 340
	legendTop    = plotBottom + 64
	legendRow    = 20
	chartPadding = 12

	// stepLimit is the largest series drawn as an exact step function. Above
	// it the curve is a thinned polyline (see cdfPoints).
	stepLimit = 150
	// thinPx is how far, in pixels, a large series' curve must move before
	// another point is kept. Any path is at most (width + height) pixels long
	// in this metric, so a series costs at most about 350 points however many
	// samples it has, while every sample far out in the tail still moves the
	// curve by more than thinPx and is kept.
	thinPx = 3.0
	// minorLabelPx is the decade width, in pixels, from which the 2 and 5
	// ticks get labels too; below it their labels would collide.
	minorLabelPx = 120
)

// palette is the Okabe–Ito colour-blind-safe palette, reordered so the first
// colours have the most contrast on white, without its yellow (unreadable on
// white). Past its end, colours repeat with a dash pattern.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"}

var dashes = []string{"", "7 4", "2 3"}

// percentileLines are the labelled horizontal gridlines: the levels a reader
// looks up on a latency CDF.
var percentileLines = []struct {
	frac  float64
	label string
}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}}

const fontFamily = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"

// WriteCDF writes a self-contained SVG chart of the latency distribution
// (cumulative fraction of samples at or below each latency) of every series.
// A CDF shows the whole distribution, where a table shows four points of it;
// the x axis is logarithmic because pickup latencies range from a fraction of
// a millisecond (notify) to seconds (slow polling) and the interesting
// differences are ratios.
//
// The SVG has no scripts, external fonts or stylesheets, so it renders as an
// <img> in a GitHub README. Empty series appear in the legend as "no
// samples"; samples that are NaN or infinite are ignored, and samples at or
// below zero are drawn at the left edge of the axis.
func WriteCDF(w io.Writer, title string, series []Series) error {
	type prepared struct {
		name   string
		sorted []float64
	}
	ps := make([]prepared, len(series))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		sorted := make([]float64, 0, len(s.SamplesMs))
		for _, v := range s.SamplesMs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			sorted = append(sorted, v)
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		slices.Sort(sorted)
		ps[i] = prepared{s.Name, sorted}
	}
	if math.IsInf(lo, 1) { // no positive sample anywhere
		lo, hi = 1, 1
	}
	ax := newLogAxis(lo, hi, plotLeft, plotRight)
	sy := func(frac float64) float64 { return plotBottom - frac*(plotBottom-plotTop) }

	height := legendTop + legendRow*max(1, len(series)) + chartPadding
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12" fill="#222">`+"\n",
		chartWidth, height, chartWidth, height, fontFamily)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="28" text-anchor="middle" font-size="16" font-weight="bold">%s</text>`+"\n", chartWidth/2, esc(title))

	// Vertical gridlines and x tick labels.
	for _, t := range ax.ticks {
		x := ax.x(t.value)
		stroke := "#eee"
		if t.major {
			stroke = "#ccc"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x, plotTop, x, plotBottom, stroke)
		if t.labelled {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n", x, plotBottom+16, t.label)
		}
	}
	// Horizontal gridlines: quarters on the left axis, percentiles on the right.
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		y := sy(f)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>`+"\n", plotLeft-6, y+4, strconv.FormatFloat(f, 'f', -1, 64))
	}
	for _, p := range percentileLines {
		y := sy(p.frac)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="4 3"/>`+"\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" fill="#555">%s</text>`+"\n", plotRight+6, y+4, p.label)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)

	// Axis titles.
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">latency (ms, log scale)</text>`+"\n", (plotLeft+plotRight)/2, plotBottom+40)
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">cumulative fraction of jobs</text>`+"\n", (plotTop+plotBottom)/2)

	// Curves, then the legend.
	drawn := 0
	for i, s := range ps {
		if len(s.sorted) == 0 {
			continue
		}
		drawn++
		pts := cdfPoints(s.sorted, ax.x, sy)
		var d strings.Builder
		for j, p := range pts {
			if j == 0 {
				d.WriteString("M")
			} else {
				d.WriteString(" L")
			}
			fmt.Fprintf(&d, "%.1f %.1f", p[0], p[1])
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s/>`+"\n", d.String(), color(i), dashAttr(i))
		// The last few samples hug the top of a linear-y CDF; a dot on the
		// maximum keeps a long tail visible.
		last := pts[len(pts)-1]
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", last[0], last[1], color(i))
	}
	if drawn == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="14" fill="#888">no samples</text>`+"\n", (plotLeft+plotRight)/2, int(sy(0.35)))
	}
	for i, s := range ps {
		y := legendTop + legendRow*i
		swatch := color(i)
		if len(s.sorted) == 0 {
			swatch = "#bbb" // no curve carries this colour
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"%s/>`+"\n", plotLeft, y-4, plotLeft+28, y-4, swatch, dashAttr(i))
		stats := "no samples"
		if n := len(s.sorted); n > 0 {
			p50, _, p99, _, _ := Percentiles(s.sorted)
			stats = fmt.Sprintf("p50 %s ms · p99 %s ms · n=%d", FormatMs(p50), FormatMs(p99), n)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d"><tspan font-weight="bold">%s</tspan><tspan fill="#555" dx="10">%s</tspan></text>`+"\n",
			plotLeft+36, y, esc(s.name), stats)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// cdfPoints returns the curve of the empirical CDF of sorted (ascending, not
// empty) in pixel coordinates. Small series are exact step functions, so a
// reader can count samples; large ones are the polyline through
// (sample i, (i+1)/n), thinned to points at least thinPx apart (the first and
// last, the maximum, are always kept).
func cdfPoints(sorted []float64, sx, sy func(float64) float64) [][2]float64 {
	n := len(sorted)
	pts := [][2]float64{{sx(sorted[0]), sy(0)}}
	if n <= stepLimit {
		for i, v := range sorted {
			x := sx(v)
			if i > 0 {
				pts = append(pts, [2]float64{x, sy(float64(i) / float64(n))})
			}
			pts = append(pts, [2]float64{x, sy(float64(i+1) / float64(n))})
		}
		return pts
	}
	for i, v := range sorted {
		p := [2]float64{sx(v), sy(float64(i+1) / float64(n))}
		last := pts[len(pts)-1]
		if i == n-1 || math.Abs(p[0]-last[0])+math.Abs(p[1]-last[1]) >= thinPx {
			pts = append(pts, p)
		}
	}
	return pts
}

func color(i int) string { return palette[i%len(palette)] }

func dashAttr(i int) string {
	d := dashes[(i/len(palette))%len(dashes)]
	if d == "" {
		return ""
	}
	return ` stroke-dasharray="` + d + `"`
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// logAxis maps milliseconds onto a log-scaled pixel range whose ends are on
// the 1-2-5 sequence.
type logAxis struct {
	lo, hi         tick125
	px0, px1       float64
	logLo, logSpan float64
	ticks          []axisTick
}

type axisTick struct {
	value    float64
	label    string
	major    bool // a power of ten
	labelled bool
}

// newLogAxis returns an axis covering [minV, maxV] (both > 0) that spans at
// least one decade, so a single sample or a narrow distribution still shows
// as a step in the middle of the chart rather than along an edge.
func newLogAxis(minV, maxV, px0, px1 float64) logAxis {
	lo, hi := floor125(minV), ceil125(maxV)
	for hi.value()/lo.value() < 9.99 {
		lo, hi = lo.prev(), hi.next()
	}
	a := logAxis{lo: lo, hi: hi, px0: px0, px1: px1}
	a.logLo = math.Log10(lo.value())
	a.logSpan = math.Log10(hi.value()) - a.logLo
	labelMinor := (px1-px0)/a.logSpan >= minorLabelPx
	for t := lo; t.cmp(hi) <= 0; t = t.next() {
		major := t.m == 1
		a.ticks = append(a.ticks, axisTick{value: t.value(), label: t.label(), major: major, labelled: major || labelMinor})
	}
	return a
}

// x returns v's pixel position, clamped to the axis.
func (a logAxis) x(v float64) float64 {
	if v <= a.lo.value() {
		return a.px0
	}
	if v >= a.hi.value() {
		return a.px1
	}
	return a.px0 + (math.Log10(v)-a.logLo)/a.logSpan*(a.px1-a.px0)
}

// tick125 is a value on the 1-2-5 sequence, m×10^e with m in {1, 2, 5}.
// Keeping it as integers makes labels exact ("0.2", not "0.2000000001").
type tick125 struct{ m, e int }

func (t tick125) value() float64 { return float64(t.m) * math.Pow10(t.e) }

func (t tick125) next() tick125 {
	switch t.m {
	case 1:
		return tick125{2, t.e}
	case 2:
		return tick125{5, t.e}
	default:
		return tick125{1, t.e + 1}
	}
}

func (t tick125) prev() tick125 {
	switch t.m {
	case 5:
		return tick125{2, t.e}
	case 2:
		return tick125{1, t.e}
	default:
		return tick125{5, t.e - 1}
	}
}

func (t tick125) cmp(u tick125) int {
	if t.e != u.e {
		return t.e - u.e
	}
	return t.m - u.m
}

func (t tick125) label() string {
	if t.e >= 0 {
		return strconv.Itoa(t.m) + strings.Repeat("0", t.e)
	}
	return "0." + strings.Repeat("0", -t.e-1) + strconv.Itoa(t.m)
}

// floor125 returns the largest 1-2-5 value at or below v (v > 0). The small
// tolerance keeps a v that is a tick, give or take rounding, on that tick.
func floor125(v float64) tick125 {
	t := tick125{1, int(math.Floor(math.Log10(v))) - 1}
	for t.next().value() <= v*(1+1e-9) {
		t = t.next()
	}
	return t
}

// ceil125 returns the smallest 1-2-5 value at or above v (v > 0).
func ceil125(v float64) tick125 {
	t := floor125(v)
	if t.value() < v*(1-1e-9) {
		t = t.next()
	}
	return t
}
