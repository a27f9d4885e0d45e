package report

import (
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fila-run/fila/bench"
)

// Table is a titled grid of pre-formatted cells, written as aligned plain
// text. Cells are strings so each caller decides its own units and precision;
// Table only lines them up.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	// AlignRight marks the columns to right-align (numbers, so their digits
	// line up). Columns past its end are left-aligned.
	AlignRight []bool
}

// columnGap separates columns. Two spaces keep columns apart even when a
// cell fills its column.
const columnGap = "  "

// Write writes the title (if any), the header, a separator of dashes under
// each column and the rows. Widths count runes, not bytes, so cells such as
// "—" or "1.5×" align. Trailing spaces are trimmed from every line so the
// output diffs and pastes cleanly.
func (t Table) Write(w io.Writer) error {
	ncol := len(t.Header)
	for _, r := range t.Rows {
		ncol = max(ncol, len(r))
	}
	widths := make([]int, ncol)
	measure := func(cells []string) {
		for i, c := range cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	measure(t.Header)
	for _, r := range t.Rows {
		measure(r)
	}

	var b strings.Builder
	if t.Title != "" {
		b.WriteString(t.Title)
		b.WriteByte('\n')
	}
	line := func(cells []string) {
		var l strings.Builder
		for i := range ncol {
			cell := ""
			if i < len(cells) {
				cell = cells[i]
			}
			if i > 0 {
				l.WriteString(columnGap)
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i < len(t.AlignRight) && t.AlignRight[i] {
				l.WriteString(pad + cell)
			} else {
				l.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	if len(t.Header) > 0 {
		line(t.Header)
		seps := make([]string, ncol)
		for i, wd := range widths {
			seps[i] = strings.Repeat("-", wd)
		}
		line(seps)
	}
	for _, r := range t.Rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatMs formats a duration in milliseconds with the precision a reader can
// use: 0.01 below 10 ms, 0.1 below 100 ms and whole milliseconds above, so
// "0.42" and "1250" both read at a glance. The thresholds apply to the
// rounded value, so 9.999 prints as "10.0", never "10.00". NaN and
// infinities print as "—".
func FormatMs(ms float64) string {
	return formatNumber(ms)
}

// formatNumber is FormatMs's rule for any quantity (seconds, rates, ratios)
// whose useful precision shrinks as it grows.
func formatNumber(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	a := math.Abs(v)
	switch {
	case a < 9.995:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 99.95:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// Ratio formats a/b as "1.23×", for "how many times slower" columns. It
// returns "—" when b is 0 (or either side is not a number), since no ratio
// is meaningful there.
func Ratio(a, b float64) string {
	r := a / b
	if b == 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return "—"
	}
	return formatNumber(r) + "×"
}

// LatencyTable writes one row per pickup-latency scenario, percentiles in
// milliseconds, with the rate asked of the producers and the rate they
// reached ("—" when not recorded). It reads the percentile fields as they are: call Fill first
// on results that only carry samples.
func LatencyTable(w io.Writer, results []bench.LatencyResult) error {
	t := Table{
		Title:      "Pickup latency (ms)",
		Header:     []string{"system", "mode", "rate/s", "reached/s", "count", "lost", "p50", "p90", "p99", "p99.9", "max"},
		AlignRight: []bool{false, false, true, true, true, true, true, true, true, true, true},
	}
	for _, r := range results {
		reached := "—"
		if r.AchievedPerSec > 0 {
			reached = strconv.FormatFloat(r.AchievedPerSec, 'f', 0, 64)
		}
		t.Rows = append(t.Rows, []string{
			r.System, r.Mode,
			strconv.Itoa(r.RatePerSec), reached, strconv.Itoa(r.Count), strconv.Itoa(r.Lost),
			FormatMs(r.P50Ms), FormatMs(r.P90Ms), FormatMs(r.P99Ms), FormatMs(r.P999Ms), FormatMs(r.MaxMs),
		})
	}
	return t.Write(w)
}

// ThroughputTable writes one row per throughput scenario.
func ThroughputTable(w io.Writer, results []bench.ThroughputResult) error {
	t := Table{
		Title:      "Throughput",
		Header:     []string{"system", "mode", "workers", "jobs", "seconds", "jobs/s"},
		AlignRight: []bool{false, false, true, true, true, true},
	}
	for _, r := range results {
		t.Rows = append(t.Rows, []string{
			r.System, r.Mode,
			strconv.Itoa(r.Workers), strconv.Itoa(r.Jobs),
			formatNumber(r.Seconds), formatNumber(r.JobsPerSec),
		})
	}
	return t.Write(w)
}
