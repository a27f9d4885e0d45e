package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// Reference figures for the goals, measured on the 2-core development
// machine with bench/peers: River v0.51 with FetchCooldown lowered to 10 ms
// (its best pickup latency) and tuned for its best drain.
const (
	riverTunedP99Ms     = 6.8
	riverTunedDrainRate = 9000.0
)

// WriteText writes every table, the goals and the notes.
func WriteText(w io.Writer, r *Results) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "server: %s\n", r.Server)
	b.WriteString("Each scenario ran in a fresh database. On a shared 2-core machine these numbers are noisy: compare runs made back to back.\n")
	sections := []func(*bytes.Buffer, *Results) error{latencySection, overheadSection, throughputSection, idleSection, producersSection, goalsSection}
	for _, sec := range sections {
		if err := sec(&b, r); err != nil {
			return err
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func latencySection(b *bytes.Buffer, r *Results) error {
	if len(r.Latency) == 0 {
		return nil
	}
	b.WriteString("\n")
	if err := report.LatencyTable(b, r.Latency); err != nil {
		return err
	}
	b.WriteString("From just before the producer's COMMIT to the handler's first line (fila) or to the notification /\n" +
		"the claim's return (floor), on one clock. lost: committed but not started within 5 s of the last commit.\n")
	return nil
}

// overheadSection compares each Fila mode with the floor of the same rate.
func overheadSection(b *bytes.Buffer, r *Results) error {
	t := report.Table{
		Title:      "Fila over the floor (floor = bare LISTEN + one claim statement, same rate)",
		Header:     []string{"rate/s", "mode", "p50", "floor p50", "p50 ×", "p99", "floor p99", "p99 ×"},
		AlignRight: []bool{true, false, true, true, true, true, true, true},
	}
	for _, l := range r.Latency {
		if l.System != SystemFila {
			continue
		}
		f, ok := latencyOf(r.Latency, SystemFloor, FloorNotifyClaim, l.RatePerSec)
		if !ok {
			continue
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(l.RatePerSec), l.Mode,
			report.FormatMs(l.P50Ms), report.FormatMs(f.P50Ms), report.Ratio(l.P50Ms, f.P50Ms),
			report.FormatMs(l.P99Ms), report.FormatMs(f.P99Ms), report.Ratio(l.P99Ms, f.P99Ms)})
	}
	if len(t.Rows) == 0 {
		return nil
	}
	b.WriteString("\n")
	return t.Write(b)
}

func throughputSection(b *bytes.Buffer, r *Results) error {
	if len(r.Throughput) == 0 {
		return nil
	}
	t := report.Table{
		Title:      "Throughput (no-op jobs)",
		Header:     []string{"system", "mode", "workers", "jobs", "seconds", "jobs/s", "config"},
		AlignRight: []bool{false, false, true, true, true, true, false},
	}
	for _, x := range r.Throughput {
		t.Rows = append(t.Rows, []string{x.System, x.Mode, strconv.Itoa(x.Workers), strconv.Itoa(x.Jobs),
			strconv.FormatFloat(x.Seconds, 'f', 2, 64), strconv.FormatFloat(x.JobsPerSec, 'f', 0, 64), x.Config})
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	b.WriteString("drain: from starting the workers on a backlog until every completion is written; steady: jobs completed\n" +
		"while producers insert at once; sql-floor: the claim statement and one fenced UPDATE per batch, no runtime.\n")
	return nil
}

// idleBound is the most transactions an idle worker should run in a window:
// one per poll interval and one per keep-alive.
func idleBound(x bench.IdleResult) int {
	n := 0
	if x.SafetyPollSec > 0 {
		n += int(math.Ceil(x.Seconds / x.SafetyPollSec))
	}
	if x.PingSec > 0 {
		n += int(math.Ceil(x.Seconds / x.PingSec))
	}
	return n
}

func idleSection(b *bytes.Buffer, r *Results) error {
	if len(r.Idle) == 0 {
		return nil
	}
	t := report.Table{
		Title:      "Idle cost of one worker (its database's transactions and backend CPU over the window)",
		Header:     []string{"mode", "window s", "transactions", "tx/s", "bound", "per 30 s", "backends", "CPU ms", "CPU ms/s"},
		AlignRight: []bool{false, true, true, true, true, true, true, true, true},
	}
	for _, x := range r.Idle {
		cpu, cpuRate := "—", "—"
		if x.CPUMs >= 0 {
			cpu = strconv.FormatFloat(x.CPUMs, 'f', 0, 64)
			cpuRate = report.FormatMs(x.CPUMs / x.Seconds)
		}
		bound := strconv.Itoa(idleBound(x))
		if x.Mode == ModeWAL {
			bound = "—" // its replication connection's own traffic has no fixed budget here
		}
		t.Rows = append(t.Rows, []string{x.Mode, strconv.FormatFloat(x.Seconds, 'f', 1, 64),
			strconv.FormatInt(x.Transactions, 10), report.FormatMs(x.TxPerSec), bound,
			report.FormatMs(x.TxPerSec * 30), strconv.Itoa(x.Backends), cpu, cpuRate})
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	b.WriteString("bound: one transaction per poll interval in the window, rounded up (notify: safety poll every 30 s plus the\n" +
		"listener's keep-alive every 10 s). A window shorter than 30 s may hold no safety poll at all: run --idle-duration 60s\n" +
		"to see it. Counted from pg_stat_database after the workers' backends exited; CPU from /proc (— when remote).\n")
	return nil
}

func producersSection(b *bytes.Buffer, r *Results) error {
	if len(r.Producers) == 0 {
		return nil
	}
	var variants []string
	var counts []int
	for _, p := range r.Producers {
		if !slices.Contains(variants, p.Mode) {
			variants = append(variants, p.Mode)
		}
		if !slices.Contains(counts, p.Producers) {
			counts = append(counts, p.Producers)
		}
	}
	slices.Sort(counts)
	t := report.Table{
		Title:      "Producers: single-row INSERT transactions, commits/s and COMMIT latency p50/p99 (ms)",
		Header:     []string{"producers"},
		AlignRight: []bool{true},
	}
	for _, v := range variants {
		t.Header = append(t.Header, v+" commits/s", "p50", "p99")
		t.AlignRight = append(t.AlignRight, true, true, true)
	}
	for _, n := range counts {
		row := []string{strconv.Itoa(n)}
		for _, v := range variants {
			i := slices.IndexFunc(r.Producers, func(p bench.ProducerResult) bool { return p.Mode == v && p.Producers == n })
			if i < 0 {
				row = append(row, "—", "—", "—")
				continue
			}
			p := r.Producers[i]
			row = append(row, strconv.FormatFloat(p.CommitsPerSec, 'f', 0, 64), report.FormatMs(p.P50Ms), report.FormatMs(p.P99Ms))
		}
		t.Rows = append(t.Rows, row)
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	b.WriteString("notify: the insert trigger on (its NOTIFY takes one instance-wide lock at every commit); no-trigger: the same\n" +
		"insert with the trigger disabled; wal: trigger disabled while a worker follows inserts by logical replication.\n")
	return nil
}

// goalsSection says whether each target was met in this run.
func goalsSection(b *bytes.Buffer, r *Results) error {
	var lines []string
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	if n, ok := latencyOf(r.Latency, SystemFila, ModeNotify, 100); ok {
		if f, ok := latencyOf(r.Latency, SystemFloor, FloorNotifyClaim, 100); ok {
			lines = append(lines, fmt.Sprintf("notify p50 at 100/s within 1.2× the notify+claim floor: %s (%s ms vs %s ms, %s)",
				verdict(n.P50Ms <= 1.2*f.P50Ms), report.FormatMs(n.P50Ms), report.FormatMs(f.P50Ms), report.Ratio(n.P50Ms, f.P50Ms)))
		}
		lines = append(lines, fmt.Sprintf("notify p99 at 100/s under 10 ms and under River tuned's %.1f ms: %s (%s ms)",
			riverTunedP99Ms, verdict(n.P99Ms < 10 && n.P99Ms < riverTunedP99Ms), report.FormatMs(n.P99Ms)))
	}
	i := slices.IndexFunc(r.Throughput, func(t bench.ThroughputResult) bool { return t.Mode == ThroughputDrain })
	if i >= 0 {
		d := r.Throughput[i]
		lines = append(lines, fmt.Sprintf("drain at least 1.5× River tuned (%.0f/s): %s (%.0f/s)",
			1.5*riverTunedDrainRate, verdict(d.JobsPerSec >= 1.5*riverTunedDrainRate), d.JobsPerSec))
		if j := slices.IndexFunc(r.Throughput, func(t bench.ThroughputResult) bool { return t.Mode == ThroughputSQLFloor }); j >= 0 {
			f := r.Throughput[j]
			lines = append(lines, fmt.Sprintf("drain at least half the SQL floor: %s (%.0f/s vs %.0f/s, %s)",
				verdict(d.JobsPerSec >= f.JobsPerSec/2), d.JobsPerSec, f.JobsPerSec, report.Ratio(d.JobsPerSec, f.JobsPerSec)))
		}
	}
	if i := slices.IndexFunc(r.Idle, func(x bench.IdleResult) bool { return x.Mode == ModeNotify }); i >= 0 {
		x := r.Idle[i]
		lines = append(lines, fmt.Sprintf("idle notify worker at most one query per safety poll plus keep-alives: %s (%d transactions in %.0f s, bound %d)",
			verdict(x.Transactions <= int64(idleBound(x))), x.Transactions, x.Seconds, idleBound(x)))
	}
	if len(lines) == 0 {
		return nil
	}
	b.WriteString("\nGoals (this run)\n")
	for _, l := range lines {
		fmt.Fprintf(b, "- %s\n", l)
	}
	return nil
}

// WriteJSON writes r to path.
func WriteJSON(path string, r *Results) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ChartSeries are the latency curves at rate: the floors first, then Fila's modes.
func ChartSeries(r *Results, rate int) []report.Series {
	var s []report.Series
	for _, sys := range []string{SystemFloor, SystemFila} {
		for _, l := range r.Latency {
			if l.System == sys && l.RatePerSec == rate {
				s = append(s, report.Series{Name: l.System + " " + l.Mode, SamplesMs: l.SamplesMs})
			}
		}
	}
	return s
}

// WriteChart writes the latency CDFs of every mode at rate to path as SVG.
func WriteChart(path string, r *Results, rate int) error {
	var b bytes.Buffer
	if err := report.WriteCDF(&b, fmt.Sprintf("Pickup latency at %d jobs/s, from just before COMMIT", rate), ChartSeries(r, rate)); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
