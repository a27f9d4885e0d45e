package chaos

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// NA marks a count that a scenario does not measure.
const NA = -1

// Size is how big a run is. Each scenario says how it uses it.
type Size struct {
	// Jobs is the number of jobs a drain runs (the restart and lock-wait
	// scenarios); the other scenarios scale their load from it, within the
	// bounds that keep them short.
	Jobs int
	// Workers is the number of workers (runtimes or processes) of a drain.
	Workers int
}

// Result is what one scenario found.
type Result struct {
	Name  string
	Fault string
	Load  string
	// Lost counts jobs that did not end completed (or in the state the
	// scenario expects).
	Lost int
	// Duplicated counts jobs whose effect happened more than once: a handler
	// ran to the end twice. Fila delivers at least once, so a crash between
	// an effect and its completion may run a job again; a scenario says when
	// that is expected.
	Duplicated int
	// Overlapping counts jobs that two runs held at the same time. Any
	// overlap fails the scenario.
	Overlapping int
	// WorstOverlap is the longest time two runs of one job ran at once,
	// over every job of the scenario: the goal is 0. Each run's start and
	// end are taken on one clock; a command killed by a signal ends when
	// the last of its processes was last seen alive (see runWatch).
	WorstOverlap time.Duration
	// Margin is the smallest time left before a lease expired when the run
	// of its attempt ended, over the Rescues leases that expired while
	// their attempt had a run (a job rescued, or its attempt stopped by a
	// lock, after it). Negative: a run outlived its lease, which is what
	// lets two run at once.
	Margin time.Duration
	// Rescues counts the expired leases Margin was measured over; 0 means
	// Margin was not measured.
	Rescues int
	// Recovery is how long the workers took to get back to normal after the
	// fault, as the scenario defines it (see Notes); 0 when not measured.
	Recovery time.Duration
	// Notes are the scenario's figures and what they mean, one per line.
	Notes []string
	// Failures are the checks that did not hold; none means the scenario passed.
	Failures []string
	// Took is how long the scenario ran.
	Took time.Duration
}

// OK reports whether every check held.
func (r *Result) OK() bool { return len(r.Failures) == 0 }

func (r *Result) check(ok bool, format string, args ...any) {
	if !ok {
		r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
	}
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Scenario is one fault and what must hold under it.
type Scenario struct {
	// Name selects it on the command line (fila chaos --scenarios).
	Name string
	// Fault says what is injected.
	Fault string
	// Run runs it in env. An error means it could not run (the Env lacks
	// something, or the setup failed); a property that did not hold is a
	// Failure in the Result.
	Run func(ctx context.Context, env *Env, size Size) (*Result, error)
}

// Scenarios returns every scenario, in the order `fila chaos` runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "kill", Fault: "worker process SIGKILLed mid-job", Run: KillWorker},
		{Name: "kill-guard", Fault: "exec guard SIGKILLed while its command runs", Run: KillGuard},
		{Name: "stall", Fault: "worker SIGSTOPped, its command running on", Run: StallWorker},
		{Name: "listener-terminate", Fault: "listener backend terminated", Run: TerminateListener},
		{Name: "listener-halfopen", Fault: "listener connection half-open", Run: HalfOpenListener},
		{Name: "pg-restart-fast", Fault: "PostgreSQL restart, fast shutdown", Run: RestartPostgresFast},
		{Name: "pg-restart-immediate", Fault: "PostgreSQL restart, immediate shutdown", Run: RestartPostgresImmediate},
		{Name: "pgbouncer-restart", Fault: "PgBouncer killed and restarted", Run: RestartPgBouncer},
		{Name: "pool-exhaustion", Fault: "shared pool exhausted by handlers", Run: PoolExhaustion},
		{Name: "poison", Fault: "poison input", Run: Poison},
		{Name: "notify-pressure", Fault: "NOTIFY burst, every slot busy", Run: NotifyPressure},
		{Name: "shutdown", Fault: "SIGTERM under load, then hard stop", Run: ShutdownUnderLoad},
		{Name: "deaf-handler", Fault: "hard stop of commands that ignore SIGTERM", Run: DeafHandler},
		{Name: "mixed-kinds", Fault: "workers of different kinds on one queue", Run: MixedKinds},
		{Name: "scheduled", Fault: "jobs scheduled ahead, workers idle", Run: ScheduledOnTime},
		{Name: "lock-waits", Fault: "none (row-lock waits sampled)", Run: LockWaits},
		{Name: "ha-switchover", Fault: "Patroni switchover under load", Run: HASwitchover},
		{Name: "ha-failover", Fault: "Patroni leader's postmaster SIGKILLed under load", Run: HAFailover},
		{Name: "partition-freeze", Fault: "silent network partition after a claim", Run: PartitionFreeze},
		{Name: "partition-reset", Fault: "network partition by TCP reset after a claim", Run: PartitionReset},
		{Name: "frozen-worker", Fault: "worker SIGSTOPped while its long command runs", Run: FrozenWorker},
		{Name: "row-lock", Fault: "application row locks on running jobs, longer than the lease", Run: RowLock},
		{Name: "lost-claim-reply", Fault: "connection lost between a claim's commit and its reply", Run: LostClaimReply},
		{Name: "escaping-descendants", Fault: "commands whose children escape (setsid, background, double fork)", Run: EscapingDescendants},
		{Name: "shutdown-db-down", Fault: "SIGTERM while the database is unreachable", Run: ShutdownDBDown},
		{Name: "unique-pending", Fault: "unique keys held only while pending, under retries and a SIGKILL", Run: UniquePending},
		{Name: "tiny-timeout", Fault: "a role whose statement_timeout is 8 ms", Run: TinyTimeout},
	}
}

// Header is the table's header.
var Header = []string{"fault", "load", "lost", "duplicated", "overlapping", "worst overlap", "margin", "recovery", "result"}

// numeric are the columns of Header aligned right.
func numeric(i int) bool { return i >= 2 && i <= 7 }

// Row is the result's table row.
func (r *Result) Row() []string {
	result := "ok"
	if !r.OK() {
		result = "FAIL"
	}
	worst, margin := "—", "—"
	if r.Overlapping != NA {
		worst = millis(r.WorstOverlap)
	}
	if r.Rescues > 0 {
		margin = millis(r.Margin)
	}
	return []string{r.Fault, r.Load, count(r.Lost), count(r.Duplicated), count(r.Overlapping), worst, margin, duration(r.Recovery), result}
}

// millis writes a measured duration, 0 included, in milliseconds below
// 10 s.
func millis(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case d == 0:
		return "0 ms"
	case a < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case a < 10*time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

func count(n int) string {
	if n == NA {
		return "—"
	}
	return strconv.Itoa(n)
}

func duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

// WriteTable writes results as an aligned text table, or as a Markdown table
// when markdown is set, followed by each scenario's notes and failures.
func WriteTable(w io.Writer, results []*Result, markdown bool) error {
	rows := make([][]string, 0, len(results))
	for _, r := range results {
		rows = append(rows, r.Row())
	}
	var b strings.Builder
	if markdown {
		line := func(cells []string) {
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
		line(Header)
		seps := make([]string, len(Header))
		for i := range seps {
			seps[i] = "---"
			if numeric(i) {
				seps[i] = "---:"
			}
		}
		line(seps)
		for _, r := range rows {
			line(r)
		}
	} else {
		widths := make([]int, len(Header))
		for _, r := range append([][]string{Header}, rows...) {
			for i, c := range r {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
		line := func(cells []string) {
			var l strings.Builder
			for i, c := range cells {
				pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
				if numeric(i) {
					l.WriteString(pad + c)
				} else {
					l.WriteString(c + pad)
				}
				l.WriteString("  ")
			}
			b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
		}
		line(Header)
		seps := make([]string, len(Header))
		for i := range seps {
			seps[i] = strings.Repeat("-", widths[i])
		}
		line(seps)
		for _, r := range rows {
			line(r)
		}
	}
	for _, r := range results {
		if len(r.Notes) == 0 && len(r.Failures) == 0 {
			continue
		}
		b.WriteString("\n")
		if markdown {
			fmt.Fprintf(&b, "**%s** (%s, took %s)\n\n", r.Name, r.Fault, r.Took.Round(time.Second))
		} else {
			fmt.Fprintf(&b, "%s (took %s):\n", r.Name, r.Took.Round(time.Second))
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- FAILED: %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Defaults of Size.
const (
	JobsDefault    = 20000
	WorkersDefault = 6
)

// WithDefaults fills zero fields.
func (s Size) WithDefaults() Size {
	if s.Jobs <= 0 {
		s.Jobs = JobsDefault
	}
	if s.Workers <= 0 {
		s.Workers = WorkersDefault
	}
	return s
}

// Run runs sc in env and fills in the result's name, fault and duration.
func Run(ctx context.Context, env *Env, sc Scenario, size Size) (*Result, error) {
	start := time.Now()
	res, err := sc.Run(ctx, env, size.WithDefaults())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	res.Name, res.Fault, res.Took = sc.Name, sc.Fault, time.Since(start)
	// The overlap check holds over every scenario, whatever else it checks.
	if res.Overlapping > 0 && res.OK() {
		res.check(false, "%d jobs ran twice at the same time (worst overlap %s)", res.Overlapping, millis(res.WorstOverlap))
	}
	return res, nil
}

// Lookup returns the scenario named name.
func Lookup(name string) (Scenario, bool) {
	for _, sc := range Scenarios() {
		if sc.Name == name {
			return sc, true
		}
	}
	return Scenario{}, false
}
