package ui

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
)

// The charts are drawn here as inline SVG, so the page shows them without
// any script, and each bar and point carries a <title> that the browser
// shows on hover. Only numbers and times formatted here go into the SVG.

// charts are the overview's two charts of the last hour.
type charts struct {
	Throughput template.HTML
	Pickup     template.HTML
	// Totals of the hour.
	Completed, Failed, Pickups int64
}

const (
	chartW, chartH         = 720, 190
	chartLeft, chartRight  = 56, 12
	chartTop, chartBottom  = 12, 24
	chartPlotW, chartPlotH = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
)

func drawCharts(h hourOfMinutes, now time.Time) charts {
	var c charts
	for _, m := range h.Minutes {
		c.Completed += m.Completed
		c.Failed += m.Failed
		c.Pickups += m.Pickups
	}
	c.Throughput = throughputChart(h.Minutes, now)
	c.Pickup = pickupChart(h.Minutes, now)
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*p >= v {
			return f * p
		}
	}
	return 10 * p
}

// frame starts an SVG with a linear y grid from 0 to yMax, its labels and
// the x labels (minutes ago).
func frame(b *strings.Builder, label string, yMax float64, yFormat func(float64) string, n int) {
	fmt.Fprintf(b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH, template.HTMLEscapeString(label))
	for i := 0; i <= 4; i++ {
		y := chartTop + chartPlotH - float64(i)*chartPlotH/4
		fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, chartLeft, y, chartW-chartRight, y)
		fmt.Fprintf(b, `<text class="ylabel" x="%d" y="%.1f">%s</text>`, chartLeft-6, y+4, template.HTMLEscapeString(yFormat(yMax*float64(i)/4)))
	}
	xLabels(b, n)
}

// xLabels marks the minutes ago under the plot of n minutes.
func xLabels(b *strings.Builder, n int) {
	step := float64(chartPlotW) / float64(n)
	for ago := 60; ago >= 0; ago -= 15 {
		x := chartLeft + (float64(n-1-ago)+0.5)*step
		text := fmt.Sprintf("−%d min", ago)
		if ago == 0 {
			text = "now"
		}
		fmt.Fprintf(b, `<text class="xlabel" x="%.1f" y="%d">%s</text>`, x, chartH-6, text)
	}
}

func throughputChart(ms []minute, now time.Time) template.HTML {
	var peak float64
	for _, m := range ms {
		peak = max(peak, float64(m.Completed+m.Failed))
	}
	yMax := niceCeil(peak)
	var b strings.Builder
	frame(&b, "attempts completed and failed per minute, last hour", yMax, func(v float64) string { return trimFloat(v) }, len(ms))
	step := float64(chartPlotW) / float64(len(ms))
	for i, m := range ms {
		x := chartLeft + float64(i)*step + 1
		w := max(step-2, 1)
		base := float64(chartTop + chartPlotH)
		hc := float64(m.Completed) / yMax * chartPlotH
		hf := float64(m.Failed) / yMax * chartPlotH
		fmt.Fprintf(&b, `<g><title>%s: %d completed, %d failed</title>`, m.At.In(now.Location()).Format("15:04"), m.Completed, m.Failed)
		fmt.Fprintf(&b, `<rect class="hit" x="%.1f" y="%d" width="%.1f" height="%d"/>`, x, chartTop, w, chartPlotH)
		if hc > 0 {
			fmt.Fprintf(&b, `<rect class="completed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x, base-hc, w, hc)
		}
		if hf > 0 {
			fmt.Fprintf(&b, `<rect class="failed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, x, base-hc-hf, w, hf)
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// pickupChart draws p50 and p95 on a logarithmic axis of whole decades:
// pickups range from a millisecond on the notify path to seconds when a
// poll or a safety poll found the job, and both must stay readable.
func pickupChart(ms []minute, now time.Time) template.HTML {
	lo, hi := math.Inf(1), 0.0
	for _, m := range ms {
		if m.Pickups > 0 {
			lo = min(lo, millis(m.PickupP50), millis(m.PickupP95))
			hi = max(hi, millis(m.PickupP50), millis(m.PickupP95))
		}
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	decLo := math.Floor(math.Log10(max(lo, 0.01)))
	decHi := math.Ceil(math.Log10(max(hi, 0.01)))
	if decHi <= decLo {
		decHi = decLo + 1
	}
	y := func(v float64) float64 {
		f := (math.Log10(max(v, 0.01)) - decLo) / (decHi - decLo)
		return chartTop + chartPlotH - f*chartPlotH
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="pickup latency p50 and p95 per minute, last hour">`, chartW, chartH)
	for d := decLo; d <= decHi; d++ {
		yy := y(math.Pow(10, d))
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, chartLeft, yy, chartW-chartRight, yy)
		fmt.Fprintf(&b, `<text class="ylabel" x="%d" y="%.1f">%s</text>`, chartLeft-6, yy+4, formatMs(math.Pow(10, d)))
	}
	xLabels(&b, len(ms))
	step := float64(chartPlotW) / float64(len(ms))
	x := func(i int) float64 { return chartLeft + (float64(i)+0.5)*step }
	for _, series := range []struct {
		class string
		value func(minute) float64
	}{
		{"p95", func(m minute) float64 { return millis(m.PickupP95) }},
		{"p50", func(m minute) float64 { return millis(m.PickupP50) }},
	} {
		// A minute without pickups breaks the line: no work is not zero
		// latency.
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, series.class, strings.Join(seg, " "))
			}
			seg = seg[:0]
		}
		for i, m := range ms {
			if m.Pickups == 0 {
				flush()
				continue
			}
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x(i), y(series.value(m))))
		}
		flush()
	}
	for i, m := range ms {
		if m.Pickups == 0 {
			continue
		}
		fmt.Fprintf(&b, `<g><title>%s: p50 ≤ %s, p95 ≤ %s over %d pickups</title><rect class="hit" x="%.1f" y="%d" width="%.1f" height="%d"/><circle class="p95" cx="%.1f" cy="%.1f" r="2.5"/><circle class="p50" cx="%.1f" cy="%.1f" r="2.5"/></g>`,
			m.At.In(now.Location()).Format("15:04"), formatMs(millis(m.PickupP50)), formatMs(millis(m.PickupP95)), m.Pickups,
			x(i)-step/2, chartTop, step, chartPlotH, x(i), y(millis(m.PickupP95)), x(i), y(millis(m.PickupP50)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// formatMs prints milliseconds with a unit that keeps them short.
func formatMs(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms < 1:
		return trimFloat(ms) + " ms"
	case ms < 10:
		return trimFloat(ms) + " ms"
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 60_000:
		return trimFloat(math.Round(ms/100)/10) + " s"
	}
	return trimFloat(math.Round(ms/6000)/10) + " min"
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}
