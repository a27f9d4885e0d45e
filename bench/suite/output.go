package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// WriteText writes every table, the goals and the notes.
func WriteText(w io.Writer, r *Results) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "server: %s\n", r.Server)
	b.WriteString("Each scenario ran in a fresh database. On a shared 2-core machine these numbers are noisy: compare runs made back to back.\n")
	sections := []func(*bytes.Buffer, *Results) error{latencySection, overheadSection, throughputSection, idleSection,
		producersSection, bigTableSection, bulkSection, execSection, insertCostSection, breakdownSection, soakSection, goalsSection}
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
	b.WriteString("From just before the producer's COMMIT to the handler's first line (fila, peers) or to the notification /\n" +
		"the claim's return (floor), on one clock. reached/s: the commit rate the producers reached (rate/s was asked).\n" +
		"lost: committed but not started within 5 s of the last commit. floor listen: a bare LISTEN connection;\n" +
		"floor listen+claim: the same plus a one-row UPDATE … SKIP LOCKED claim, prepared, on a direct connection,\n" +
		"repeated until no row is left: one round trip and one commit per job, plus one per notification, so on a\n" +
		"busy machine at 100/s and above it can queue behind itself where a worker claiming batches does not.\n" +
		"fila wal runs with the insert trigger's NOTIFY off.\n")
	return nil
}

// overheadSection compares each Fila mode with the floor of the same rate.
func overheadSection(b *bytes.Buffer, r *Results) error {
	t := report.Table{
		Title:      "Fila over the floor (floor = bare LISTEN + the minimal prepared claim, same rate)",
		Header:     []string{"rate/s", "mode", "p50", "floor p50", "p50 ×", "p99", "floor p99", "p99 ×"},
		AlignRight: []bool{true, false, true, true, true, true, true, true},
	}
	for _, l := range r.Latency {
		if l.System != SystemFila {
			continue
		}
		f, ok := latencyOf(r.Latency, SystemFloor, FloorListenClaim, l.RatePerSec)
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
		"while producers insert at once; sql-floor: a minimal batch claim and one fenced UPDATE per batch, both prepared,\n" +
		"no runtime, timed from opening its connections as the drain is from starting the runtime; peer rows come\n" +
		"from bench/peers in this run (River's pool is open before its clock starts; graphile-worker's and pg-boss's\n" +
		"Node.js process is running, its schema installed, and its workers start inside the clock).\n")
	for _, x := range r.Throughput {
		if x.System == SystemFila && x.GoCPUMs > 0 && x.Jobs > 0 {
			fmt.Fprintf(b, "fila %s: the Go process used %.0f ms of CPU for %d jobs, %.1f µs a job (garbage collector about %.1f µs);\n"+
				"  %.2f of the machine's %d CPUs over the drain's %.2f s.\n",
				x.Mode, x.GoCPUMs, x.Jobs, 1000*x.GoCPUMs/float64(x.Jobs), 1000*x.GoGCCPUMs/float64(x.Jobs),
				x.GoCPUMs/1000/x.Seconds, r.Machine.CPUs, x.Seconds)
		}
	}
	return nil
}

// breakdownSection shows where one pickup's time goes, step by step.
func breakdownSection(b *bytes.Buffer, r *Results) error {
	if len(r.Breakdown) == 0 {
		return nil
	}
	for _, x := range r.Breakdown {
		t := report.Table{
			Title: fmt.Sprintf("Where a pickup's time goes: %s %s at %d/s, %d of %d jobs traced (latency p50 %s ms over all)",
				x.System, x.Mode, x.RatePerSec, x.Traced, x.Jobs, report.FormatMs(x.LatencyP50Ms)),
			Header:     []string{"step", "p50 ms", "mean ms"},
			AlignRight: []bool{false, true, true},
		}
		for _, st := range x.Steps {
			t.Rows = append(t.Rows, []string{st.Name, report.FormatMs(st.P50Ms), report.FormatMs(st.MeanMs)})
		}
		t.Rows = append(t.Rows, []string{"whole pickup (traced jobs)", report.FormatMs(x.TracedP50Ms), report.FormatMs(x.TracedMeanMs)})
		b.WriteString("\n")
		if err := t.Write(b); err != nil {
			return err
		}
		if x.BareRoundTripMs > 0 {
			fmt.Fprintf(b, "A bare SELECT 1 on the same pool after the run: %s ms round trip (p50).\n", report.FormatMs(x.BareRoundTripMs))
		}
	}
	b.WriteString("Steps on one clock: COMMIT sent, the notification read by a bare LISTEN connection (beside Fila's own\n" +
		"listener), the producer woken (Observer.Woken), the claim handed to pgx and its reply read (a pgx tracer on\n" +
		"the runtime's pool; for Fila the claim by id), the handler's first line. Means add up; medians need not.\n")
	return nil
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
		bound := strconv.Itoa(report.IdleBound(x))
		if x.Mode == ModeWAL {
			bound = "—" // its replication connection's own traffic has no fixed budget here
		}
		mode := x.Mode
		if x.Queues > 0 {
			mode = fmt.Sprintf("%s, %d queues, safety poll %s", x.Mode, x.Queues, formatSec(x.SafetyPollSec))
		}
		t.Rows = append(t.Rows, []string{mode, strconv.FormatFloat(x.Seconds, 'f', 1, 64),
			strconv.FormatInt(x.Transactions, 10), report.FormatMs(x.TxPerSec), bound,
			report.FormatMs(x.TxPerSec * 30), strconv.Itoa(x.Backends), cpu, cpuRate})
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	b.WriteString("bound: one transaction per poll interval in the window, rounded up (notify: safety poll every 30 s plus the\n" +
		"listener's keep-alive every 10 s), plus one per refresh of the worker's row (every 5 s, every mode). A window shorter than 30 s may hold no safety poll at all: run --idle-duration 60s\n" +
		"to see it. Counted from pg_stat_database after the workers' backends exited; CPU from /proc (— when remote).\n" +
		"notify: less what a bare LISTEN in a database of its own ran over the same window, reading other databases'\n" +
		"notifications from the server's shared queue (noted below when there were any). The rows of many queues poll\n" +
		"every queue in one statement per safety poll, so their bound does not grow with the queues.\n")
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
	b.WriteString("notify-always: the insert trigger notifying every commit (its NOTIFY takes one instance-wide lock at\n" +
		"commit), as for a program listening on every queue; notify: the trigger on while a notify-mode worker runs, as Fila\n" +
		"runs by default (producers notify only while it sleeps; under load it polls); no-trigger: the same insert with the\n" +
		"trigger disabled; wal: trigger disabled while a worker follows inserts by logical replication.\n")
	return nil
}

func bigTableSection(b *bytes.Buffer, r *Results) error {
	x := r.BigTable
	if x == nil {
		return nil
	}
	t := report.Table{
		Title: fmt.Sprintf("Pickup on a big table: fila notify at %d/s, empty, then with %d completed and %d future-scheduled rows",
			x.Empty.RatePerSec, x.Completed, x.Scheduled),
		Header:     []string{"table", "count", "lost", "p50", "p90", "p99", "max"},
		AlignRight: []bool{false, true, true, true, true, true, true},
	}
	for _, row := range []struct {
		name string
		l    bench.LatencyResult
	}{{"empty", x.Empty}, {"seeded", x.Big}} {
		t.Rows = append(t.Rows, []string{row.name, strconv.Itoa(row.l.Count), strconv.Itoa(row.l.Lost),
			report.FormatMs(row.l.P50Ms), report.FormatMs(row.l.P90Ms), report.FormatMs(row.l.P99Ms), report.FormatMs(row.l.MaxMs)})
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	then := "VACUUM ANALYZE"
	if x.Checkpointed {
		then = "VACUUM ANALYZE and CHECKPOINT"
	}
	fmt.Fprintf(b, "Seeded with INSERT … SELECT generate_series, trigger off, then %s: %.1f s; table %s after seeding.\n",
		then, x.SeedSeconds, report.FormatBytes(x.TableBytes))
	return nil
}

func bulkSection(b *bytes.Buffer, r *Results) error {
	x := r.Bulk
	if x == nil {
		return nil
	}
	t := report.Table{
		Title:      fmt.Sprintf("Bulk insert of %d jobs into an empty fila_jobs (best of %d rounds each)", x.Jobs, x.Rounds),
		Header:     []string{"way", "seconds", "jobs/s", "vs COPY"},
		AlignRight: []bool{false, true, true, true},
	}
	t.Rows = [][]string{
		{"runtime.InsertMany, one call", strconv.FormatFloat(x.InsertManySec, 'f', 3, 64),
			strconv.FormatFloat(x.InsertManyPerSec, 'f', 0, 64), report.Ratio(x.InsertManyPerSec, x.CopyPerSec)},
		{"COPY (pgx CopyFrom), the floor", strconv.FormatFloat(x.CopySec, 'f', 3, 64),
			strconv.FormatFloat(x.CopyPerSec, 'f', 0, 64), "1.00×"},
	}
	b.WriteString("\n")
	return t.Write(b)
}

func execSection(b *bytes.Buffer, r *Results) error {
	x := r.Exec
	if x == nil {
		return nil
	}
	t := report.Table{
		Title: fmt.Sprintf("A command per job: %d jobs at concurrency %d (best of %d rounds each; CPU per job from /proc and rusage)",
			x.Jobs, x.Concurrency, x.Rounds),
		Header:     []string{"way", "seconds", "jobs/s", "vs xargs", "CPU µs/job beyond the command", "command's CPU µs/job"},
		AlignRight: []bool{false, true, true, true, true, true},
	}
	sec := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	t.Rows = [][]string{
		{fmt.Sprintf("fila work --concurrency %d --exec KIND=true", x.Concurrency), sec(x.FilaSec), num(x.FilaPerSec),
			report.Ratio(x.FilaPerSec, x.XargsPerSec), num(x.FilaOverheadCPUUs), num(x.FilaCommandCPUUs)},
		{fmt.Sprintf("xargs -P %d sh -c true, the floor", x.Concurrency), sec(x.XargsSec), num(x.XargsPerSec), "1.00×",
			"", num(x.XargsCPUUs) + " (xargs and sh)"},
	}
	b.WriteString("\n")
	return t.Write(b)
}

func insertCostSection(b *bytes.Buffer, r *Results) error {
	if len(r.InsertCost) == 0 {
		return nil
	}
	t := report.Table{
		Title: fmt.Sprintf("One job's INSERT in a fresh session (cold) and the next (warm): median ms of %d sessions each",
			r.InsertCost[0].Sessions),
		Header:     []string{"server", "PL/pgSQL", "way", "cold", "vs plain", "warm", "vs plain"},
		AlignRight: []bool{false, false, false, true, true, true, true},
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	for _, x := range r.InsertCost {
		preload := "loaded per session"
		if x.PLpgSQLPreloaded {
			preload = "preloaded"
		}
		t.Rows = append(t.Rows,
			[]string{x.Server, preload, "plain table, same columns (the floor)", f(x.PlainColdP50Ms), "1.00×", f(x.PlainWarmP50Ms), "1.00×"},
			[]string{"", "", "fila_jobs, the same INSERT", f(x.FilaColdP50Ms), report.Ratio(x.FilaColdP50Ms, x.PlainColdP50Ms),
				f(x.FilaWarmP50Ms), report.Ratio(x.FilaWarmP50Ms, x.PlainWarmP50Ms)},
			[]string{"", "", "fila_jobs, runtime.Insert", f(x.InsertColdP50Ms), report.Ratio(x.InsertColdP50Ms, x.PlainColdP50Ms),
				f(x.InsertWarmP50Ms), report.Ratio(x.InsertWarmP50Ms, x.PlainWarmP50Ms)})
	}
	b.WriteString("\n")
	return t.Write(b)
}

func soakSection(b *bytes.Buffer, r *Results) error {
	x := r.Soak
	if x == nil {
		return nil
	}
	t := report.Table{
		Title: fmt.Sprintf("Soak: fila %s (%s, Retention %s), producers asked %d jobs/s for %s, one row per %s",
			x.Mode, x.Config, time.Duration(x.RetentionSec*float64(time.Second)), x.RatePerSec,
			time.Duration(x.Seconds*float64(time.Second)), time.Duration(x.WindowSec*float64(time.Second))),
		Header: []string{"until s", "inserted/s", "completed/s", "deleted/s", "picked up", "p50", "p99",
			"table", "indexes", "live rows", "dead rows"},
		AlignRight: []bool{true, true, true, true, true, true, true, true, true, true, true},
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	for _, w := range x.Windows {
		t.Rows = append(t.Rows, []string{num(w.EndSec), num(w.InsertedPerSec), num(w.CompletedPerSec), num(w.DeletedPerSec),
			strconv.Itoa(w.PickedUp), report.FormatMs(w.P50Ms), report.FormatMs(w.P99Ms),
			report.FormatBytes(w.TableBytes), report.FormatBytes(w.IndexBytes),
			strconv.FormatInt(w.LiveRows, 10), strconv.FormatInt(w.DeadRows, 10)})
	}
	b.WriteString("\n")
	if err := t.Write(b); err != nil {
		return err
	}
	fmt.Fprintf(b, "%d jobs committed, %d not started within 5 s of the end. Producers commit every %s what the schedule owes,\n"+
		"in one transaction.\n"+
		"table: pg_total_relation_size('fila_jobs'); deleted/s: retention's deletes (pg_stat_user_tables.n_tup_del);\n"+
		"live and dead rows: the statistics' estimates. p50/p99: pickup latency of the jobs whose handler started in the row.\n",
		x.Inserted, x.Lost, soakTick)
	if len(x.Windows) > 0 {
		sizeOK, worst := report.SoakSizeOK(x)
		flatOK, ratio := report.SoakP99Flat(x)
		verdict := func(ok bool) string {
			if ok {
				return "yes"
			}
			return "NO"
		}
		fmt.Fprintf(b, "Size within %.0f× the first row's: %s (largest %s). p99 flat (last row ≤ %.1f× the first): %s (%s).\n",
			report.SoakSizeFactor, verdict(sizeOK), report.Ratio(worst, 1), report.SoakP99Factor, verdict(flatOK), report.Ratio(ratio, 1))
	}
	return nil
}

// goalsSection says whether each target was met, on this run's figures
// alone.
func goalsSection(b *bytes.Buffer, r *Results) error {
	fmt.Fprintf(b, "\nGoals (this run's figures only; peers: %s)\n", r.Peers)
	return report.WriteGoals(b, report.Goals(r.GoalInput()))
}

// WriteJSON writes r, with its goals judged, to path.
func WriteJSON(path string, r *Results) error {
	r.Goals = report.Goals(r.GoalInput())
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ChartSeries are the latency curves at rate: the floors first, then Fila's
// modes, then every peer's that ran, in the order they ran.
func ChartSeries(r *Results, rate int) []report.Series {
	var s []report.Series
	add := func(keep func(string) bool) {
		for _, l := range r.Latency {
			if keep(l.System) && l.RatePerSec == rate {
				s = append(s, report.Series{Name: l.System + " " + l.Mode, SamplesMs: l.SamplesMs})
			}
		}
	}
	add(func(sys string) bool { return sys == SystemFloor })
	add(func(sys string) bool { return sys == SystemFila })
	add(report.IsPeer)
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

// formatSec formats whole seconds as a duration ("2s", "30s").
func formatSec(sec float64) string { return (time.Duration(sec * float64(time.Second))).String() }
