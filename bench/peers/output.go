package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// results is the JSON shape shared with `fila bench --json`, so one reader
// handles both files and the merged one. Idle, BigTable and Soak come only
// from Fila's run; the goals read them.
type results struct {
	Machine    machine                  `json:"machine"`
	Latency    []bench.LatencyResult    `json:"latency"`
	Throughput []bench.ThroughputResult `json:"throughput"`
	Idle       []bench.IdleResult       `json:"idle,omitempty"`
	BigTable   *bench.BigTableResult    `json:"bigtable,omitempty"`
	Soak       *bench.SoakResult        `json:"soak,omitempty"`
	// Goals are judged on this file's rows alone, so on figures of one run.
	Goals []report.Goal `json:"goals,omitempty"`
}

// goalInput is what the goals are judged on.
func (r *results) goalInput() report.GoalInput {
	return report.GoalInput{Latency: r.Latency, Throughput: r.Throughput, Idle: r.Idle, Soak: r.Soak, BigTable: r.BigTable}
}

// machine is where results were measured. It is written as `fila bench`
// writes it, a report.MachineInfo object, and also read from a plain
// string, so hand-made or older files load too.
type machine struct {
	info report.MachineInfo
	text string // set instead of info when read from a string
}

func (m machine) String() string {
	if m.text != "" {
		return m.text
	}
	return m.info.String()
}

func (m machine) MarshalJSON() ([]byte, error) {
	if m.text != "" {
		return json.Marshal(m.text)
	}
	return json.Marshal(m.info)
}

func (m *machine) UnmarshalJSON(b []byte) error {
	*m = machine{}
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.text)
	}
	return json.Unmarshal(b, &m.info)
}

// merge returns Fila's results (if any) followed by the peers', under the
// peers' machine line: both ran on this machine, one after the other.
func (r *results) merge(fila *results) *results {
	m := &results{Machine: r.Machine}
	if fila != nil {
		m.Latency = append(m.Latency, fila.Latency...)
		m.Throughput = append(m.Throughput, fila.Throughput...)
		m.Idle, m.BigTable, m.Soak = fila.Idle, fila.BigTable, fila.Soak
	}
	m.Latency = append(m.Latency, r.Latency...)
	m.Throughput = append(m.Throughput, r.Throughput...)
	return m
}

// describe is the machine line: host, Go, and the PostgreSQL settings that
// decide what a COMMIT costs.
func describe(ctx context.Context, dsn string) machine {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		m, _ := report.DescribeMachine(ctx, nil)
		return machine{info: m}
	}
	defer pool.Close()
	m, _ := report.DescribeMachine(ctx, pool) // on error the host part is still there
	return machine{info: m}
}

func fmtMs(ms float64) string { return report.FormatMs(ms) }

// printResults writes the machine line, the comparison with Fila when there
// is one (or filaNote saying why not), and the full tables.
func printResults(w io.Writer, peers, fila *results, filaNote string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "machine: %s\n", peers.Machine.String())
	b.WriteString("Numbers on a shared 2-core machine are noisy: compare runs made back to back, not across days.\n\n")
	if fila != nil {
		if fm := fila.Machine.String(); fm != "" && fm != peers.Machine.String() {
			fmt.Fprintf(&b, "fila bench machine: %s\n\n", fm)
		}
		if err := comparisonTables(&b, peers, fila); err != nil {
			return err
		}
	} else if filaNote != "" {
		fmt.Fprintf(&b, "Note: %s\n\n", filaNote)
	}
	all := peers.merge(fila)
	if len(all.Latency) > 0 {
		if err := report.LatencyTable(&b, all.Latency); err != nil {
			return err
		}
		b.WriteByte('\n')
	}
	if len(all.Throughput) > 0 {
		if err := report.ThroughputTable(&b, all.Throughput); err != nil {
			return err
		}
	}
	b.WriteString("\nGoals (this run's figures only: the peers above and Fila's bench run just after them)\n")
	if err := report.WriteGoals(&b, report.Goals(all.goalInput())); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// filaReference is the Fila row a peer is compared with at one rate: mode
// "notify", Fila's default, else the first Fila row at that rate.
func filaReference(fila []bench.LatencyResult, rate int) (bench.LatencyResult, bool) {
	var first *bench.LatencyResult
	for i, r := range fila {
		if r.System != "fila" || r.RatePerSec != rate {
			continue
		}
		if r.Mode == "notify" {
			return r, true
		}
		if first == nil {
			first = &fila[i]
		}
	}
	if first != nil {
		return *first, true
	}
	return bench.LatencyResult{}, false
}

// comparisonTables writes one latency table (every rate, Fila's rows first)
// and one throughput table, each with ratios against Fila.
func comparisonTables(w io.Writer, peers, fila *results) error {
	lat := report.Table{
		Title:      "Pickup latency, side by side (vs fila = this row ÷ fila notify at the same rate; above 1× is slower)",
		Header:     []string{"rate/s", "system", "mode", "jobs", "lost", "p50 ms", "p99 ms", "p50 vs fila", "p99 vs fila"},
		AlignRight: []bool{true, false, false, true, true, true, true, true, true},
	}
	rates := []int{}
	for _, r := range append(slices.Clone(fila.Latency), peers.Latency...) {
		if !slices.Contains(rates, r.RatePerSec) {
			rates = append(rates, r.RatePerSec)
		}
	}
	slices.Sort(rates)
	for _, rate := range rates {
		ref, ok := filaReference(fila.Latency, rate)
		for _, r := range append(slices.Clone(fila.Latency), peers.Latency...) {
			if r.RatePerSec != rate {
				continue
			}
			p50, p99 := "—", "—"
			if ok {
				p50, p99 = report.Ratio(r.P50Ms, ref.P50Ms), report.Ratio(r.P99Ms, ref.P99Ms)
			}
			lat.Rows = append(lat.Rows, []string{
				strconv.Itoa(rate), r.System, r.Mode, strconv.Itoa(r.Count), strconv.Itoa(r.Lost),
				fmtMs(r.P50Ms), fmtMs(r.P99Ms), p50, p99,
			})
		}
	}
	if len(lat.Rows) > 0 {
		if err := lat.Write(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}

	thr := report.Table{
		Title:      "Drain throughput, side by side (vs fila = this row's jobs/s ÷ fila's drain jobs/s; below 1× is slower)",
		Header:     []string{"system", "mode", "workers", "jobs", "seconds", "jobs/s", "vs fila"},
		AlignRight: []bool{false, false, true, true, true, true, true},
	}
	var ref *bench.ThroughputResult
	for i, r := range fila.Throughput {
		if r.System == "fila" && (ref == nil || r.Mode == "drain" && ref.Mode != "drain") {
			ref = &fila.Throughput[i]
		}
	}
	for _, r := range append(slices.Clone(fila.Throughput), peers.Throughput...) {
		vs := "—"
		if ref != nil {
			vs = report.Ratio(r.JobsPerSec, ref.JobsPerSec)
		}
		thr.Rows = append(thr.Rows, []string{
			r.System, r.Mode, strconv.Itoa(r.Workers), strconv.Itoa(r.Jobs),
			strconv.FormatFloat(r.Seconds, 'f', 2, 64), strconv.FormatFloat(r.JobsPerSec, 'f', 0, 64), vs,
		})
	}
	if len(thr.Rows) > 0 {
		if err := thr.Write(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	return nil
}

func writeJSON(path string, r *results) error {
	r.Goals = report.Goals(r.goalInput())
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeCharts writes the latency CDF chart to path. With one rate that is
// the whole chart; with several, path gets every series (named with its
// rate) and one chart per rate is written beside it (cdf.svg → cdf-100.svg),
// since a dozen curves at three rates overlap while one rate's few compare
// at a glance.
func writeCharts(path string, lat []bench.LatencyResult, rates []int) error {
	series := func(rate int) []report.Series {
		var s []report.Series
		for _, r := range lat {
			if rate != 0 && r.RatePerSec != rate {
				continue
			}
			name := r.System + " " + r.Mode
			if rate == 0 {
				name += fmt.Sprintf(" @%d/s", r.RatePerSec)
			}
			s = append(s, report.Series{Name: name, SamplesMs: r.SamplesMs})
		}
		return s
	}
	title := func(rate int) string { return fmt.Sprintf("Pickup latency CDF at %d jobs/s", rate) }
	if len(rates) == 1 {
		return writeChart(path, title(rates[0]), series(rates[0]))
	}
	if err := writeChart(path, "Pickup latency CDF, all rates", series(0)); err != nil {
		return err
	}
	ext := filepath.Ext(path)
	for _, rate := range rates {
		p := strings.TrimSuffix(path, ext) + "-" + strconv.Itoa(rate) + ext
		if err := writeChart(p, title(rate), series(rate)); err != nil {
			return err
		}
	}
	return nil
}

func writeChart(path, title string, series []report.Series) error {
	var b bytes.Buffer
	if err := report.WriteCDF(&b, title, series); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
