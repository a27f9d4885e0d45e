package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/fila-run/fila/bench"
)

// Goal is one of Fila's performance targets, judged only on figures measured
// in the same run: a comparison with a peer or a floor whose figure this run
// did not measure is "not measured", never a comparison with a number from
// another day.
type Goal struct {
	Target string `json:"target"`
	Status string `json:"status"` // GoalMet, GoalMissed or GoalNotMeasured
	Detail string `json:"detail"` // the figures behind the verdict, or what is missing
	// Margin is how far the figure is from the goal's threshold, as a share
	// of the threshold: positive is headroom (0.12: 12% better than
	// needed), negative a shortfall. Absent when not measured.
	Margin *float64 `json:"margin,omitempty"`
}

// Goal statuses.
const (
	GoalMet         = "met"
	GoalMissed      = "MISSED"
	GoalNotMeasured = "not measured"
)

// Fila's targets, as factors of what it is compared with.
const (
	// FloorFactor: notify p50 at most this many times the listen+claim floor's.
	FloorFactor = 1.1
	// ProducerShare: the share of the asked commit rate the producers must
	// reach at HighRate.
	ProducerShare = 0.95
	// DrainOverPeer: drain at least this many times the best peer's best
	// tuned drain.
	DrainOverPeer = 2.0
	// DrainOverSQLFloor: drain at least this share of the raw SQL floor.
	DrainOverSQLFloor = 0.8
	// DrainCPUPerJobUs: the Go process's CPU per job of the drain, at most
	// this many microseconds, on a drain of at least DrainCPUMinJobs jobs
	// (a shorter one is mostly start-up).
	DrainCPUPerJobUs = 4.0
	DrainCPUMinJobs  = 100_000
	// MinSamples: a latency goal is decided only on rows with at least this
	// many pickups, so that a p50 stands for more than noise.
	MinSamples = 200
	// PeerLostShare: a peer row whose lost jobs exceed this share of its
	// jobs did not keep up, and is not a peer's best.
	PeerLostShare = 0.01
	// SoakSizeFactor: during a soak the table stays within this many times
	// its size at the end of the first window.
	SoakSizeFactor = 2.0
	// SoakP99Factor: a soak's p99 is flat when the last window's is at most
	// this many times the first window's.
	SoakP99Factor = 1.5
	// BigTableFactor: pickup p50 on the seeded table at most this many
	// times the empty table's.
	BigTableFactor = 1.2
	// ExecOverXargs: `fila work --exec` drains `true` jobs at least this
	// share of the speed of xargs -P running `sh -c true`.
	ExecOverXargs = 0.6
	// InsertColdOverPlain: a fresh session's first insert into fila_jobs
	// costs at most this many times the same insert into a plain table
	// with the same columns.
	InsertColdOverPlain = 2.0
)

// Rates the goals are set at.
var (
	// P50Rates are the rates of the p50 goals.
	P50Rates = []int{10, 100}
	// P99Rate is the rate of the p99 goal.
	P99Rate = 100
	// HighRate is the single-job commit rate at which NOTIFY's commit lock
	// matters.
	HighRate = 1000
)

// HighRateMode is the runtime mode docs/wake-sources.md recommends at HighRate
// single-job commits a second ("Choosing notify, WAL or poll": past a few hundred
// notifying commits a second, switch to WAL).
const HighRateMode = bench.ModeWAL

// GoalInput is everything one run measured that a goal may look at. Rows of
// peers (River, graphile-worker, pg-boss, gue) are there only when they ran
// in the same run.
type GoalInput struct {
	Latency    []bench.LatencyResult
	Throughput []bench.ThroughputResult
	Idle       []bench.IdleResult
	Soak       *bench.SoakResult
	BigTable   *bench.BigTableResult
	Exec       *bench.ExecResult
	InsertCost []bench.InsertCostResult
}

// Goals judges every target on in.
func Goals(in GoalInput) []Goal {
	var gs []Goal
	for _, rate := range P50Rates {
		gs = append(gs, vsBestPeer(in.Latency, bench.ModeNotify, rate, "p50", p50))
	}
	for _, rate := range P50Rates {
		gs = append(gs, notifyVsFloor(in.Latency, rate))
	}
	gs = append(gs, vsBestPeer(in.Latency, bench.ModeNotify, P99Rate, "p99", p99))
	gs = append(gs, highRateProducers(in.Latency), vsBestPeer(in.Latency, HighRateMode, HighRate, "p50", p50))
	gs = append(gs, drainVsPeers(in.Throughput), drainVsSQLFloor(in.Throughput), drainCPUGoal(in.Throughput))
	gs = append(gs, soakGoals(in.Soak)...)
	gs = append(gs, bigTableGoal(in.BigTable), idleGoal(in.Idle), idleQueuesGoal(in.Idle))
	gs = append(gs, execGoal(in.Exec), insertColdGoal(in.InsertCost))
	return gs
}

// WriteGoals writes one line per goal, with its margin when measured.
func WriteGoals(w io.Writer, goals []Goal) error {
	var b strings.Builder
	for _, g := range goals {
		margin := ""
		if g.Margin != nil {
			margin = "; margin " + FormatMargin(*g.Margin)
		}
		fmt.Fprintf(&b, "- %s: %s (%s%s)\n", g.Target, g.Status, g.Detail, margin)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatMargin formats a margin as a signed percentage: "+12%", "-3.5%".
func FormatMargin(m float64) string {
	pct := 100 * m
	s := strconv.FormatFloat(pct, 'f', 0, 64)
	if math.Abs(pct) < 10 {
		s = strconv.FormatFloat(pct, 'f', 1, 64)
	}
	if pct >= 0 {
		s = "+" + s
	}
	return s + "%"
}

// atMost judges value ≤ limit, with its margin.
func atMost(target string, value, limit float64, format string, args ...any) Goal {
	g := judge(target, value <= limit, format, args...)
	if limit > 0 {
		m := (limit - value) / limit
		g.Margin = &m
	}
	return g
}

// atLeast judges value ≥ limit, with its margin.
func atLeast(target string, value, limit float64, format string, args ...any) Goal {
	g := judge(target, value >= limit, format, args...)
	if limit > 0 {
		m := (value - limit) / limit
		g.Margin = &m
	}
	return g
}

func judge(target string, ok bool, format string, args ...any) Goal {
	g := Goal{Target: target, Status: GoalMissed, Detail: fmt.Sprintf(format, args...)}
	if ok {
		g.Status = GoalMet
	}
	return g
}

func notMeasured(target, format string, args ...any) Goal {
	return Goal{Target: target, Status: GoalNotMeasured, Detail: fmt.Sprintf(format, args...)}
}

func p50(l bench.LatencyResult) float64 { return l.P50Ms }
func p99(l bench.LatencyResult) float64 { return l.P99Ms }

// samples is how many pickups a latency row's percentiles stand on.
func samples(l bench.LatencyResult) int { return l.Count - l.Lost }

// tooFew says why a row cannot decide a goal, or "" when it can.
func tooFew(l bench.LatencyResult) string {
	if n := samples(l); n < MinSamples {
		return fmt.Sprintf("%s %s at %d/s has %d pickups, fewer than the %d a goal needs: run longer (--duration, --min-samples)",
			l.System, l.Mode, l.RatePerSec, n, MinSamples)
	}
	return ""
}

// findLatency returns the row of system/mode at rate.
func findLatency(rs []bench.LatencyResult, system, mode string, rate int) (bench.LatencyResult, bool) {
	for _, r := range rs {
		if r.System == system && r.Mode == mode && r.RatePerSec == rate && r.Count > 0 {
			return r, true
		}
	}
	return bench.LatencyResult{}, false
}

// IsPeer says whether a row's system is another job system (not Fila, not
// a floor).
func IsPeer(system string) bool { return system != bench.SystemFila && system != bench.SystemFloor }

// BestPeer returns, of every peer configuration measured at rate (each
// system's default and tuned modes alike), the row with the lowest by:
// what the best choice among the peers would give. A row that lost more
// than PeerLostShare of its jobs did not keep up and is left out.
func BestPeer(rs []bench.LatencyResult, rate int, by func(bench.LatencyResult) float64) (bench.LatencyResult, bool) {
	var best bench.LatencyResult
	found := false
	for _, r := range rs {
		if !IsPeer(r.System) || r.RatePerSec != rate || r.Count == 0 || float64(r.Lost) > PeerLostShare*float64(r.Count) {
			continue
		}
		if !found || by(r) < by(best) {
			best, found = r, true
		}
	}
	return best, found
}

const noPeers = "no peer ran in this run: fila bench --peers, or bench/peers"

// vsBestPeer judges fila mode's pct at rate against the best peer's.
func vsBestPeer(rs []bench.LatencyResult, mode string, rate int, pct string, by func(bench.LatencyResult) float64) Goal {
	target := fmt.Sprintf("%s %s at %d/s ≤ the best peer's", mode, pct, rate)
	f, ok := findLatency(rs, bench.SystemFila, mode, rate)
	if !ok {
		return notMeasured(target, "no fila %s row at %d/s", mode, rate)
	}
	p, ok := BestPeer(rs, rate, by)
	if !ok {
		return notMeasured(target, "fila %s ms; %s", FormatMs(by(f)), noPeers)
	}
	for _, l := range []bench.LatencyResult{f, p} {
		if why := tooFew(l); why != "" {
			return notMeasured(target, "%s", why)
		}
	}
	return atMost(target, by(f), by(p), "%s ms vs %s %s %s ms, %s",
		FormatMs(by(f)), p.System, p.Mode, FormatMs(by(p)), Ratio(by(f), by(p)))
}

func notifyVsFloor(rs []bench.LatencyResult, rate int) Goal {
	target := fmt.Sprintf("notify p50 at %d/s ≤ %.1f× the listen+claim floor's", rate, FloorFactor)
	f, ok := findLatency(rs, bench.SystemFila, bench.ModeNotify, rate)
	if !ok {
		return notMeasured(target, "no fila notify row at %d/s", rate)
	}
	fl, ok := findLatency(rs, bench.SystemFloor, bench.FloorListenClaim, rate)
	if !ok {
		return notMeasured(target, "no floor row at %d/s: run the floor scenario", rate)
	}
	for _, l := range []bench.LatencyResult{f, fl} {
		if why := tooFew(l); why != "" {
			return notMeasured(target, "%s", why)
		}
	}
	return atMost(target, f.P50Ms, FloorFactor*fl.P50Ms, "%s ms vs floor %s ms, %s",
		FormatMs(f.P50Ms), FormatMs(fl.P50Ms), Ratio(f.P50Ms, fl.P50Ms))
}

func highRateProducers(rs []bench.LatencyResult) Goal {
	target := fmt.Sprintf("producers at %d single-job commits/s reach ≥ %.0f%% of it (fila %s)", HighRate, ProducerShare*100, HighRateMode)
	f, ok := findLatency(rs, bench.SystemFila, HighRateMode, HighRate)
	if !ok || f.AchievedPerSec == 0 {
		return notMeasured(target, "no fila %s row at %d/s", HighRateMode, HighRate)
	}
	return atLeast(target, f.AchievedPerSec, ProducerShare*float64(HighRate), "%.0f/s, %.1f%%",
		f.AchievedPerSec, 100*f.AchievedPerSec/float64(HighRate))
}

func findThroughput(ts []bench.ThroughputResult, system, mode string) (bench.ThroughputResult, bool) {
	for _, t := range ts {
		if t.System == system && t.Mode == mode {
			return t, true
		}
	}
	return bench.ThroughputResult{}, false
}

// BestTunedDrain returns the fastest drain of any peer in a tuned
// configuration.
func BestTunedDrain(ts []bench.ThroughputResult) (bench.ThroughputResult, bool) {
	var best *bench.ThroughputResult
	for i, t := range ts {
		if IsPeer(t.System) && strings.HasPrefix(t.Mode, bench.TunedPrefix) && (best == nil || t.JobsPerSec > best.JobsPerSec) {
			best = &ts[i]
		}
	}
	if best == nil {
		return bench.ThroughputResult{}, false
	}
	return *best, true
}

func drainVsPeers(ts []bench.ThroughputResult) Goal {
	target := fmt.Sprintf("drain ≥ %.1f× the best peer's best tuned drain", DrainOverPeer)
	d, ok := findThroughput(ts, bench.SystemFila, bench.ThroughputDrain)
	if !ok {
		return notMeasured(target, "no fila drain: run the drain scenario")
	}
	best, ok := BestTunedDrain(ts)
	if !ok {
		return notMeasured(target, "fila %.0f/s; %s", d.JobsPerSec, noPeers)
	}
	return atLeast(target, d.JobsPerSec, DrainOverPeer*best.JobsPerSec, "%.0f/s vs %s %s %.0f/s, %s",
		d.JobsPerSec, best.System, best.Mode, best.JobsPerSec, Ratio(d.JobsPerSec, best.JobsPerSec))
}

func drainVsSQLFloor(ts []bench.ThroughputResult) Goal {
	target := fmt.Sprintf("drain ≥ %.0f%% of the raw SQL floor", DrainOverSQLFloor*100)
	d, ok := findThroughput(ts, bench.SystemFila, bench.ThroughputDrain)
	if !ok {
		return notMeasured(target, "no fila drain: run the drain scenario")
	}
	f, ok := findThroughput(ts, bench.SystemFila, bench.ThroughputSQLFloor)
	if !ok {
		return notMeasured(target, "fila %.0f/s; no SQL floor: run the sqlfloor scenario", d.JobsPerSec)
	}
	return atLeast(target, d.JobsPerSec, DrainOverSQLFloor*f.JobsPerSec, "%.0f/s vs %.0f/s, %s",
		d.JobsPerSec, f.JobsPerSec, Ratio(d.JobsPerSec, f.JobsPerSec))
}

// drainCPUGoal judges the Go CPU per job of the untyped drain.
func drainCPUGoal(ts []bench.ThroughputResult) Goal {
	target := fmt.Sprintf("Go CPU of a %d-job drain ≤ %.0f µs a job", DrainCPUMinJobs, DrainCPUPerJobUs)
	d, ok := findThroughput(ts, bench.SystemFila, bench.ThroughputDrain)
	switch {
	case !ok:
		return notMeasured(target, "no fila drain: run the drain scenario")
	case d.GoCPUMs == 0 || d.Jobs == 0:
		return notMeasured(target, "the drain's CPU was not read")
	case d.Jobs < DrainCPUMinJobs:
		return notMeasured(target, "the drain had %d jobs: run it with --drain-jobs %d", d.Jobs, DrainCPUMinJobs)
	}
	perJob := d.GoCPUMs * 1000 / float64(d.Jobs)
	return atMost(target, perJob, DrainCPUPerJobUs, "%.1f µs a job (garbage collector %.1f)", perJob, d.GoGCCPUMs*1000/float64(d.Jobs))
}

// SoakSizeOK reports whether every window's table size stayed within
// SoakSizeFactor of the first window's, and the largest ratio seen.
func SoakSizeOK(s *bench.SoakResult) (bool, float64) {
	first := float64(s.Windows[0].TableBytes)
	worst := 0.0
	for _, w := range s.Windows {
		worst = max(worst, float64(w.TableBytes)/first)
	}
	return worst <= SoakSizeFactor, worst
}

// SoakP99Flat reports whether the last window's p99 is within SoakP99Factor
// of the first window's, and the ratio.
func SoakP99Flat(s *bench.SoakResult) (bool, float64) {
	first, last := s.Windows[0].P99Ms, s.Windows[len(s.Windows)-1].P99Ms
	r := last / first
	if first == 0 || math.IsNaN(r) {
		return false, math.NaN()
	}
	return r <= SoakP99Factor, r
}

func soakGoals(s *bench.SoakResult) []Goal {
	size := fmt.Sprintf("soak: table size within %.0f× the first window's", SoakSizeFactor)
	flat := fmt.Sprintf("soak: p99 flat (last window ≤ %.1f× the first)", SoakP99Factor)
	if s == nil || len(s.Windows) == 0 {
		const why = "run --scenarios soak, 5 minutes by default"
		return []Goal{notMeasured(size, why), notMeasured(flat, why)}
	}
	first, last := s.Windows[0], s.Windows[len(s.Windows)-1]
	_, worst := SoakSizeOK(s)
	flatOK, ratio := SoakP99Flat(s)
	sizeGoal := atMost(size, worst, SoakSizeFactor, "first %s, largest %s (%s), %d windows of %s at %d/s",
		FormatBytes(first.TableBytes), FormatBytes(int64(worst*float64(first.TableBytes))),
		formatNumber(worst)+"×", len(s.Windows), formatSeconds(s.WindowSec), s.RatePerSec)
	flatGoal := judge(flat, flatOK, "first %s ms, last %s ms, %s", FormatMs(first.P99Ms), FormatMs(last.P99Ms), formatNumber(ratio)+"×")
	if !math.IsNaN(ratio) {
		flatGoal = atMost(flat, ratio, SoakP99Factor, "%s", flatGoal.Detail)
	}
	return []Goal{sizeGoal, flatGoal}
}

func bigTableGoal(b *bench.BigTableResult) Goal {
	if b == nil {
		return notMeasured(fmt.Sprintf("pickup p50 with a large history and backlog ≤ %.1f× the empty table's", BigTableFactor),
			"run the bigtable scenario")
	}
	target := fmt.Sprintf("pickup p50 with %d completed and %d future-scheduled rows ≤ %.1f× the empty table's",
		b.Completed, b.Scheduled, BigTableFactor)
	return atMost(target, b.Big.P50Ms, BigTableFactor*b.Empty.P50Ms, "%s ms vs %s ms empty, %s",
		FormatMs(b.Big.P50Ms), FormatMs(b.Empty.P50Ms), Ratio(b.Big.P50Ms, b.Empty.P50Ms))
}

// IdleBound is the most transactions an idle worker should run in its
// window: one per poll interval, one per listener keep-alive and one per
// refresh of its row, each rounded up.
func IdleBound(x bench.IdleResult) int {
	n := 0
	if x.LivenessSec > 0 {
		n += int(math.Ceil(x.Seconds / x.LivenessSec))
	}
	if x.SafetyPollSec > 0 {
		n += int(math.Ceil(x.Seconds / x.SafetyPollSec))
	}
	if x.PingSec > 0 {
		n += int(math.Ceil(x.Seconds / x.PingSec))
	}
	return n
}

func idleGoal(idle []bench.IdleResult) Goal {
	target := "idle notify worker: at most one query per safety poll plus keep-alives and liveness refreshes"
	for _, x := range idle {
		if x.Mode == bench.ModeNotify && x.Queues == 0 {
			return atMost(target, float64(x.Transactions), float64(IdleBound(x)), "%d transactions in %.0f s, bound %d",
				x.Transactions, x.Seconds, IdleBound(x))
		}
	}
	return notMeasured(target, "run the idle scenario")
}

// idleQueuesGoal judges the idle notify worker of the most queues: its cost
// must not grow with them.
func idleQueuesGoal(idle []bench.IdleResult) Goal {
	var most *bench.IdleResult
	for i, x := range idle {
		if x.Mode == bench.ModeNotify && x.Queues > 0 && (most == nil || x.Queues > most.Queues) {
			most = &idle[i]
		}
	}
	if most == nil {
		return notMeasured("idle notify worker of many queues: at most one query per safety poll plus keep-alives and liveness refreshes", "run the idle scenario")
	}
	target := fmt.Sprintf("idle notify worker of %d queues: at most one query per safety poll plus keep-alives and liveness refreshes", most.Queues)
	return atMost(target, float64(most.Transactions), float64(IdleBound(*most)), "%d transactions in %.0f s, bound %d",
		most.Transactions, most.Seconds, IdleBound(*most))
}

// FormatBytes formats a size in binary units: "812 kB", "14.2 MB", "1.30 GB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return formatNumber(v) + " " + []string{"kB", "MB", "GB", "TB"}[i]
}

func formatSeconds(s float64) string { return formatNumber(s) + " s" }

// execGoal judges `fila work --exec` against xargs -P running the same
// commands.
func execGoal(x *bench.ExecResult) Goal {
	target := fmt.Sprintf("--exec true drains ≥ %.1f× the speed of xargs -P sh -c true at the same concurrency", ExecOverXargs)
	if x == nil || x.XargsPerSec <= 0 {
		return notMeasured(target, "run the exec scenario")
	}
	return atLeast(target, x.FilaPerSec, ExecOverXargs*x.XargsPerSec, "%.0f jobs/s vs %.0f commands/s, %s; Fila's CPU beyond the command %.0f µs per attempt",
		x.FilaPerSec, x.XargsPerSec, Ratio(x.FilaPerSec, x.XargsPerSec), x.FilaOverheadCPUUs)
}

// insertColdGoal judges a fresh session's first insert into fila_jobs
// against a plain table's on the server as given (the first row); the
// detail adds the other rows (a server that preloads PL/pgSQL).
func insertColdGoal(rows []bench.InsertCostResult) Goal {
	target := fmt.Sprintf("a fresh session's first insert into fila_jobs ≤ %.1f× a plain table's", InsertColdOverPlain)
	if len(rows) == 0 || rows[0].PlainColdP50Ms <= 0 {
		return notMeasured(target, "run the insert scenario")
	}
	var detail []string
	for _, r := range rows {
		preload := "PL/pgSQL loaded per session"
		if r.PLpgSQLPreloaded {
			preload = "PL/pgSQL preloaded"
		}
		detail = append(detail, fmt.Sprintf("%s (%s): %.2f ms vs %.2f ms, %s", r.Server, preload,
			r.FilaColdP50Ms, r.PlainColdP50Ms, Ratio(r.FilaColdP50Ms, r.PlainColdP50Ms)))
	}
	r := rows[0]
	return atMost(target, r.FilaColdP50Ms, InsertColdOverPlain*r.PlainColdP50Ms, "%s", strings.Join(detail, "; "))
}
