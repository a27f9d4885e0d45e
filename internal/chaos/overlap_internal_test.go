package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOverlapStats(t *testing.T) {
	t.Parallel()
	t0 := wall(time.Now())
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	runs := []run{
		// Job 1: the second run starts 300 ms before the first ends.
		{job: 1, attempt: 1, start: at(0), end: at(1000)},
		{job: 1, attempt: 2, start: at(700), end: at(2000)},
		// Job 2: one after the other.
		{job: 2, attempt: 1, start: at(0), end: at(500)},
		{job: 2, attempt: 2, start: at(500), end: at(900)},
		// Job 3: a short run inside a long one; and an open run.
		{job: 3, attempt: 1, start: at(0), end: at(5000)},
		{job: 3, attempt: 2, start: at(1000), end: at(1200)},
		{job: 4, attempt: 1, start: at(0)},
		{job: 4, attempt: 2, start: at(100), end: at(150)},
	}
	jobs, worst := overlapStats(runs, at(3000))
	require.Equal(t, []int64{1, 3, 4}, jobs)
	require.Equal(t, 300*time.Millisecond, worst)
	jobs, worst = overlapStats(runs[2:4], at(3000))
	require.Empty(t, jobs)
	require.Zero(t, worst)

	var res Result
	require.Equal(t, []int64{1, 3, 4}, res.overlapping(runs, at(3000)))
	require.Equal(t, 3, res.Overlapping)
	require.Equal(t, 300*time.Millisecond, res.WorstOverlap)
}

func TestMillis(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                "0 ms",
		300 * time.Microsecond:           "0.3 ms",
		912 * time.Millisecond:           "912 ms",
		-498 * time.Millisecond:          "-498 ms",
		9800 * time.Millisecond:          "9800 ms",
		12 * time.Second:                 "12.0 s",
		-1500 * time.Microsecond:         "-1.5 ms",
		2*time.Second + time.Microsecond: "2000 ms",
	} {
		require.Equal(t, want, millis(d), d.String())
	}
}

// A runWatch ends a command's run when its processes die, whether it wrote
// its end or not, and counts a zombie as dead.
func TestRunWatch(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "runs")
	w := watchRuns(file)
	defer w.stop()
	appendLine := func(format string, args ...any) {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, format+"\n", args...)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	// A "shell" that lives 300 ms and a "child" killed at once after it
	// was reported; the child is never waited for: a zombie.
	// The run is logged as started before its shell is: it cannot end
	// sooner than the shell's 300 ms after that, however slowly the
	// processes start on a loaded machine.
	started := wall(time.Now())
	shell := exec.Command("sleep", "0.3")
	require.NoError(t, shell.Start())
	child := exec.Command("sleep", "60")
	require.NoError(t, child.Start())
	appendLine("start 7 1 0 %d %d", started.UnixNano(), shell.Process.Pid)
	appendLine("pid 7 1 0 %d %d %d", started.UnixNano(), shell.Process.Pid, child.Process.Pid)
	require.Eventually(t, func() bool {
		runs, err := w.runs()
		require.NoError(t, err)
		return len(runs) == 1 && len(runs[0].procs) == 2 && runs[0].procs[1].lastAlive.After(started)
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, child.Process.Kill())
	require.Eventually(t, func() bool {
		runs, _ := w.runs()
		return !runs[0].procs[1].alive
	}, 5*time.Second, time.Millisecond, "a zombie counts as dead")
	runs, _ := w.runs()
	require.True(t, runs[0].end.IsZero(), "the run has not ended while its shell lives")
	require.NoError(t, shell.Wait())
	exited := wall(time.Now())
	require.Eventually(t, func() bool { runs, _ := w.runs(); return !runs[0].end.IsZero() }, 5*time.Second, time.Millisecond)
	runs, _ = w.runs()
	r := runs[0]
	require.False(t, r.ok, "no end was written")
	require.True(t, r.end.After(started.Add(250*time.Millisecond)), "ended %s after start", r.end.Sub(started))
	require.False(t, r.end.After(exited))
	_ = child.Wait()

	// A run that writes its end keeps it when its shell was gone earlier.
	appendLine("start 8 1 0 %d %d", started.UnixNano(), 1<<22+1)
	appendLine("end 8 1 0 %d %d", started.Add(time.Second).UnixNano(), 1<<22+1)
	runs, _ = w.runs()
	require.Len(t, runs, 2)
	require.True(t, runs[1].ok)
	require.Equal(t, started.Add(time.Second), runs[1].end)
	w.stop()
	w.stop()
}

func TestSaysCount(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]bool{
		`{"level":"error","msg":"write outcomes failed; will retry","attempt":4,"error":"x"}`:                  false,
		`{"level":"error","msg":"could not write the outcomes of 4 attempts"}`:                                 true,
		`{"level":"error","msg":"outcomes not written; their jobs run again after their leases","outcomes":4}`: true,
		`{"level":"error","msg":"outcomes not written","outcomes":3}`:                                          false,
		`fila: 4 outcomes could not be written: the database is unreachable`:                                   true,
		`fila: stopped`: false,
	} {
		_, got := saysCount(line, "outcome", 4)
		require.Equal(t, want, got, line)
	}
}
