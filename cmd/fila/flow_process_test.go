package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// The flow-control proofs with real `fila work --config` processes: the
// database, not any one process, keeps recurring slots, limits and pauses.

// startConfigWorker starts `fila work --config FILE` with extra environment
// (NAME=VALUE), and kills it at the end of the test.
func startConfigWorker(t *testing.T, db *testdb.DB, config string, env ...string) *worker {
	t.Helper()
	cmd := filaCmd(db, "work", "--log-format", "json", "--config", config)
	cmd.Env = append(cmd.Env, env...)
	w := &worker{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker %d (%v) stderr:\n%s", cmd.Process.Pid, env, w.stderr.String())
		}
	})
	return w
}

// waitWorkersUp waits until n runtimes have registered with their wake
// source up.
func waitWorkersUp(t *testing.T, db *testdb.DB, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d runtimes listening", n), func() bool {
		var up int
		_ = db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_workers WHERE wake_source = 'up'").Scan(&up)
		return up == n
	})
}

// logEntries are a worker's JSON log lines.
func logEntries(w *worker) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(w.stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// countLog counts a worker's log entries with msg and the fields given.
func countLog(w *worker, msg string, fields map[string]any) int {
	n := 0
	for _, e := range logEntries(w) {
		if e["msg"] != msg {
			continue
		}
		match := true
		for k, v := range fields {
			if e[k] != v {
				match = false
			}
		}
		if match {
			n++
		}
	}
	return n
}

// recordingCommand is an exec command that appends "start|end JOB ATTEMPT
// WORKER UNIX_NANOS" lines to file around `sleep seconds`; WORKER is
// $FILA_TEST_WORKER, set per process ("w" if not).
func recordingCommand(file string, sleep string) string {
	stamp := func(what string) string {
		return fmt.Sprintf(`echo "%s $FILA_JOB_ID $FILA_JOB_ATTEMPT ${FILA_TEST_WORKER:-w} $(date +%%s%%N)" >> %s`, what, file)
	}
	return fmt.Sprintf("%s; %s; %s", stamp("start"), sleep, stamp("end"))
}

// execRun is one run of a recording command.
type execRun struct {
	job        int64
	attempt    int
	worker     string
	start, end time.Time // end is zero if the run did not finish
}

// readRuns parses the lines recordingCommand appended.
func readRuns(t *testing.T, file string) []execRun {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var runs []execRun
	open := map[string]int{}
	// Only whole lines: a command may have created the file, or be halfway
	// through appending its line, at the moment it is read.
	whole, _ := cutLast(string(b), "\n")
	for _, line := range strings.Split(whole, "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		require.Len(t, f, 5, "record %q", line)
		job, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		attempt, err := strconv.Atoi(f[2])
		require.NoError(t, err)
		ns, err := strconv.ParseInt(f[4], 10, 64)
		require.NoError(t, err)
		key := f[1] + " " + f[2] + " " + f[3]
		switch f[0] {
		case "start":
			open[key] = len(runs)
			runs = append(runs, execRun{job: job, attempt: attempt, worker: f[3], start: time.Unix(0, ns)})
		case "end":
			i, ok := open[key]
			require.True(t, ok, "an end without its start: %q", line)
			runs[i].end = time.Unix(0, ns)
		}
	}
	return runs
}

// mostAtOnce is the largest number of runs in progress at one instant. A
// run that ends at the instant another starts does not overlap it: the
// second was claimed after the first's outcome was written.
func mostAtOnce(runs []execRun) int {
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	for _, r := range runs {
		events = append(events, event{r.start, +1}, event{r.end, -1})
	}
	sort.Slice(events, func(i, j int) bool {
		if events[i].at.Equal(events[j].at) {
			return events[i].delta < events[j].delta
		}
		return events[i].at.Before(events[j].at)
	})
	most, now := 0, 0
	for _, e := range events {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// Three processes load one file with an @every 1s task: for ten seconds
// and more, one job is enqueued per second, for consecutive slots, none
// twice, each by exactly one of the processes.
func TestRecurringEverySecondAcrossThreeProcesses(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	config := writeConfig(t, `workers:
  - name: clock
    queues: [ticks]
recurring:
  - name: tick
    schedule: "@every 1s"
    kind: noop
    queue: ticks
`)
	var workers []*worker
	for range 3 {
		workers = append(workers, startConfigWorker(t, db, config))
	}
	waitWorkersUp(t, db, 3)
	waitFor(t, 30*time.Second, "every process schedules the task", func() bool {
		for _, w := range workers {
			if countLog(w, "scheduling recurring tasks", map[string]any{"group": "clock"}) != 1 {
				return false
			}
		}
		return true
	})
	var from time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT now()").Scan(&from))
	from = from.Truncate(time.Second).Add(time.Second)
	to := from.Add(10 * time.Second)

	slot := func(key string) time.Time {
		s, err := time.Parse(time.RFC3339, strings.TrimPrefix(key, "fila:recurring:tick:"))
		require.NoError(t, err, key)
		return s
	}
	waitFor(t, 60*time.Second, "the slot ten seconds on is enqueued", func() bool {
		var keys []string
		_ = db.Pool.QueryRow(ctx, "SELECT coalesce(array_agg(unique_key), '{}') FROM fila_jobs WHERE kind = 'noop'").Scan(&keys)
		for _, k := range keys {
			if !slot(k).Before(to) {
				return true
			}
		}
		return false
	})
	for _, w := range workers {
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, w.cmd.Wait())
	}

	rows, err := db.Pool.Query(ctx, "SELECT unique_key, queue FROM fila_jobs WHERE kind = 'noop' ORDER BY unique_key")
	require.NoError(t, err)
	var slots []time.Time
	for rows.Next() {
		var key, queue string
		require.NoError(t, rows.Scan(&key, &queue))
		require.Equal(t, "ticks", queue)
		slots = append(slots, slot(key))
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(slots), 11)
	// How late each job was enqueued, by its slot: a gap after a slot
	// enqueued more than a second late is the scheduler's missed: latest
	// at work (every process was stalled past the next slot), not a
	// duplicate-avoidance failure.
	late := map[string]any{}
	for _, w := range workers {
		for _, e := range logEntries(w) {
			if e["msg"] == "enqueued a recurring task's job" {
				late[fmt.Sprint(e["slot"])] = e["late"]
			}
		}
	}
	inWindow := 0
	for i, s := range slots {
		if i > 0 {
			require.Equal(t, time.Second, s.Sub(slots[i-1]), "slots %s and %s are not consecutive; seconds late by slot: %v", slots[i-1], s, late)
		}
		if !s.Before(from) && !s.After(to) {
			inWindow++
		}
	}
	require.Equal(t, 11, inWindow, "one job per second from %s to %s", from, to)

	enqueued, byProcess := 0, []int{}
	for _, w := range workers {
		n := countLog(w, "enqueued a recurring task's job", map[string]any{"group": "clock", "task": "tick"})
		enqueued += n
		byProcess = append(byProcess, n)
	}
	require.Equal(t, len(slots), enqueued, "each job was enqueued by exactly one process")
	t.Logf("%d slots, enqueued by the three processes: %v", len(slots), byProcess)
}

// Six processes share a kind limited to two running jobs per account: the
// runs they record never have three of one account at once, all complete,
// and the limit is reached (so the check could fail).
func TestLimitPerKeyAcrossSixProcesses(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	runFile := filepath.Join(t.TempDir(), "runs")
	config := writeConfig(t, fmt.Sprintf(`workers:
  - name: payments
    concurrency: 4
    exec:
      charge:
        command: '%s'
        limit: {max: 2, key: account}
`, recordingCommand(runFile, "sleep 0.2")))
	for i := range 6 {
		startConfigWorker(t, db, config, fmt.Sprintf("FILA_TEST_WORKER=w%d", i))
	}
	waitWorkersUp(t, db, 6)
	const accounts, perAccount = 3, 12
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'charge', jsonb_build_object('account', 'acct-' || (i % $1::int)) FROM generate_series(1, $2::int) i`,
		accounts, accounts*perAccount)
	require.NoError(t, err)
	waitFor(t, 120*time.Second, "every charge completed", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == accounts*perAccount
	})

	account := map[int64]string{}
	rows, err := db.Pool.Query(ctx, "SELECT id, payload->>'account', attempts FROM fila_jobs")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var acct string
		var attempts int
		require.NoError(t, rows.Scan(&id, &acct, &attempts))
		require.Equal(t, 1, attempts, "job %d", id)
		account[id] = acct
	}
	require.NoError(t, rows.Err())

	runs := readRuns(t, runFile)
	require.Len(t, runs, accounts*perAccount, "one run per job")
	byAccount := map[string][]execRun{}
	workers := map[string]bool{}
	for _, r := range runs {
		require.False(t, r.end.IsZero(), "job %d's run ended", r.job)
		byAccount[account[r.job]] = append(byAccount[account[r.job]], r)
		workers[r.worker] = true
	}
	require.Len(t, byAccount, accounts)
	reached := false
	for acct, rs := range byAccount {
		most := mostAtOnce(rs)
		require.LessOrEqual(t, most, 2, "account %s had %d charges running at once", acct, most)
		reached = reached || most == 2
	}
	require.True(t, reached, "two charges of one account ran at once somewhere: the limit was reached")
	require.Greater(t, len(workers), 1, "the charges were shared between processes")
	t.Logf("%d runs on %d processes", len(runs), len(workers))
}

// A worker holding the only slot of an account is SIGKILLed: the next job
// of that account starts on the other worker within the lease and a second.
func TestKilledWorkerFreesItsLimitedSlot(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	runFile := filepath.Join(t.TempDir(), "runs")
	const lease = 2 * time.Second
	// The victim's runs of account a hang; every other run finishes at once.
	hang := `if [ "$FILA_TEST_WORKER" = victim ] && grep -q '"account": "a"'; then sleep 120; fi`
	config := writeConfig(t, fmt.Sprintf(`workers:
  - name: payments
    lease: %s
    exec:
      charge:
        command: %q
        limit: {max: 1, key: account}
`, lease, recordingCommand(runFile, hang)))
	insert := func(account string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('charge', jsonb_build_object('account', $1::text)) RETURNING id`, account).Scan(&id))
		return id
	}
	state := func(id int64) string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT state FROM fila_jobs WHERE id = $1", id).Scan(&s))
		return s
	}
	startsOf := func(job ...int64) []execRun {
		var out []execRun
		for _, r := range readRuns(t, runFile) {
			for _, id := range job {
				if r.job == id {
					out = append(out, r)
				}
			}
		}
		return out
	}

	victim := startConfigWorker(t, db, config, "FILA_TEST_WORKER=victim")
	waitWorkersUp(t, db, 1)
	held := insert("a")
	waitFor(t, 30*time.Second, "the victim runs the first charge of account a", func() bool {
		return len(startsOf(held)) == 1
	})
	startConfigWorker(t, db, config, "FILA_TEST_WORKER=survivor")
	waitWorkersUp(t, db, 2)
	next := insert("a")
	other := insert("b")
	waitFor(t, 30*time.Second, "account b's charge completed: only account a's slot is full", func() bool {
		return state(other) == "completed"
	})
	require.Equal(t, "pending", state(next), "account a's slot is held by the victim")
	require.Empty(t, startsOf(next))

	// Killed once a heartbeat recorded that it runs the job: its attempt
	// counts (a worker killed before that gives it back, see the claimer's
	// tests).
	waitFor(t, 30*time.Second, "the victim heartbeated its charge", func() bool {
		var seen bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT coalesce(heartbeat_at >= started_at, false) FROM fila_jobs WHERE id = $1", held).Scan(&seen))
		return seen
	})
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	_ = victim.cmd.Wait()
	killed := time.Now()
	var first execRun
	waitFor(t, 30*time.Second, "a charge of account a starts again", func() bool {
		for _, r := range startsOf(held, next) {
			if r.worker == "survivor" {
				first = r
				return true
			}
		}
		return false
	})
	after := first.start.Sub(killed)
	t.Logf("job %d (attempt %d) started %s after the kill (lease %s)", first.job, first.attempt, after.Round(time.Millisecond), lease)
	require.LessOrEqual(t, after, lease+time.Second, "the slot freed within the lease and a second")
	waitFor(t, 30*time.Second, "both charges of account a completed", func() bool {
		return state(held) == "completed" && state(next) == "completed"
	})
	// On a loaded machine the victim may lose its own lease before the
	// kill (a renewal late) and run the charge again itself: every start
	// is an attempt, the killed one included, and the survivor's is last.
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT attempts FROM fila_jobs WHERE id = $1", held).Scan(&attempts))
	starts := startsOf(held)
	sort.Slice(starts, func(i, j int) bool { return starts[i].attempt < starts[j].attempt })
	require.GreaterOrEqual(t, len(starts), 2, "the victim's run and the survivor's")
	require.Equal(t, len(starts), attempts, "each start of the charge, the killed one included, was an attempt")
	require.Equal(t, "survivor", starts[len(starts)-1].worker, "the survivor ran the last attempt")
	for _, r := range starts[:len(starts)-1] {
		require.Equal(t, "victim", r.worker, "every attempt before the survivor's was the victim's")
	}
}

// A paused queue runs nothing while its workers are woken and claim from
// it; resumed, it runs everything at once.
func TestPausedQueueRunsNothingUntilResumed(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	runFile := filepath.Join(t.TempDir(), "runs")
	config := writeConfig(t, fmt.Sprintf(`metrics_addr: 127.0.0.1:0
workers:
  - name: mixed
    queues: [held, other]
    exec:
      job: '%s'
`, recordingCommand(runFile, "true")))
	workers := []*worker{
		startConfigWorker(t, db, config, "FILA_TEST_WORKER=w0"),
		startConfigWorker(t, db, config, "FILA_TEST_WORKER=w1"),
	}
	waitWorkersUp(t, db, 2)
	_, errOut, code := fila(t, db, "queue", "pause", "held")
	require.Zero(t, code, errOut)

	claims := func(w *worker, name string) float64 {
		f := parseMetrics(t, get(t, "http://"+servingAddr(t, w, "/metrics")+"/metrics", http.StatusOK))
		return sample(f, name, "queue", "held")
	}
	var before []float64
	for _, w := range workers {
		before = append(before, claims(w, "fila_claims_empty_total"))
	}
	var held []string
	for range 3 {
		out, errOut, code := fila(t, db, "enqueue", "--queue", "held", "--kind", "job")
		require.Zero(t, code, errOut)
		held = append(held, strings.TrimSpace(out))
	}
	out, errOut, code := fila(t, db, "enqueue", "--queue", "other", "--kind", "job")
	require.Zero(t, code, errOut)
	otherID := strings.TrimSpace(out)
	states := func() map[string]int {
		n := map[string]int{}
		rows, err := db.Pool.Query(ctx, "SELECT queue || ':' || state, count(*) FROM fila_jobs GROUP BY 1")
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var k string
			var c int
			require.NoError(t, rows.Scan(&k, &c))
			n[k] = c
		}
		return n
	}
	waitFor(t, 30*time.Second, "both workers woken for held claimed nothing from it, and other's job completed", func() bool {
		for i, w := range workers {
			if claims(w, "fila_claims_empty_total") <= before[i] {
				return false
			}
		}
		return states()["other:completed"] == 1
	})
	require.Equal(t, map[string]int{"held:pending": 3, "other:completed": 1}, states())
	runs := readRuns(t, runFile)
	require.Len(t, runs, 1)
	require.Equal(t, otherID, strconv.FormatInt(runs[0].job, 10))
	for _, w := range workers {
		require.Zero(t, sample(parseMetrics(t, get(t, "http://"+servingAddr(t, w, "/metrics")+"/metrics", http.StatusOK)),
			"fila_claimed_jobs_total", "queue", "held"))
	}

	_, errOut, code = fila(t, db, "queue", "resume", "held")
	require.Zero(t, code, errOut)
	waitFor(t, 30*time.Second, "held's jobs ran once resumed", func() bool {
		return states()["held:completed"] == 3
	})
	ran := map[string]bool{}
	for _, r := range readRuns(t, runFile) {
		ran[strconv.FormatInt(r.job, 10)] = true
	}
	for _, id := range held {
		require.True(t, ran[id], "job %s ran", id)
	}
	require.Len(t, ran, 4)
}

// --limit KIND=N:PATH limits a kind without a file: one charge of an
// account at a time, while charges of two accounts run side by side.
func TestLimitFlag(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	for _, c := range []struct{ arg, want string }{
		{"charge", "--limit charge: want KIND=N or KIND=N:PATH"},
		{"charge=two", "--limit charge=two: want KIND=N or KIND=N:PATH"},
		{"charge=0:account", "--limit charge=0:account: 0 is out of range: allowed 1 to 2147483647"},
		{"charge=1:account..id", `--limit charge=1:account..id: "account..id": want a dotted path`},
		{"refund=1", `--limit refund=1: no kind "refund" is handled (add --exec refund=COMMAND)`},
	} {
		_, errOut, code := fila(t, db, "work", "--exec", "charge=true", "--limit", c.arg)
		require.Equal(t, 1, code, c.arg)
		require.Contains(t, errOut, "fila work: "+c.want, c.arg)
	}
	_, errOut, code := fila(t, db, "work", "--exec", "charge=true", "--limit", "charge=1", "--limit", "charge=2")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--limit charge=2: kind charge is given twice")

	runFile := filepath.Join(t.TempDir(), "runs")
	startWorker(t, db, "--limit", "charge=1:account", "--exec", "charge="+recordingCommand(runFile, "sleep 0.3"))
	waitWorkersUp(t, db, 1)
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'charge', jsonb_build_object('account', a) FROM unnest('{a,b,a,b,a,b}'::text[]) a`)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "every charge completed", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == 6
	})
	account := map[int64]string{}
	rows, err := db.Pool.Query(ctx, "SELECT id, payload->>'account' FROM fila_jobs")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var a string
		require.NoError(t, rows.Scan(&id, &a))
		account[id] = a
	}
	require.NoError(t, rows.Err())
	runs := readRuns(t, runFile)
	require.Len(t, runs, 6)
	byAccount := map[string][]execRun{}
	for _, r := range runs {
		byAccount[account[r.job]] = append(byAccount[account[r.job]], r)
	}
	require.Equal(t, 1, mostAtOnce(byAccount["a"]), "account a")
	require.Equal(t, 1, mostAtOnce(byAccount["b"]), "account b")
	require.Equal(t, 2, mostAtOnce(runs), "the two accounts ran side by side")
}

// cutLast splits s around the last sep: what comes before it, and after.
func cutLast(s, sep string) (before, after string) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", s
	}
	return s[:i], s[i+len(sep):]
}

// Three processes share a kind limited to three starts per second per
// account, and one of them is SIGKILLed while it runs some: every start
// the database records (the claim's started_at, in the claim's own
// transaction, the killed process's included) leaves no one-second window
// with more than three starts of an account, the limit is reached, and
// every job completes, the killed one's again.
func TestRateLimitPerKeyAcrossProcessesWithAKill(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	// Every start of a job, recorded by the transaction that claims it.
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE test_starts (job_id bigint, attempt int, account text, started_at timestamptz, worker text);
CREATE FUNCTION test_record_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_starts VALUES (NEW.id, NEW.attempts, NEW.payload->>'account', NEW.started_at, NEW.worker);
    RETURN NULL;
END $$;
CREATE TRIGGER test_record_start AFTER UPDATE OF state ON fila_jobs FOR EACH ROW
    WHEN (OLD.state = 'pending' AND NEW.state = 'running') EXECUTE FUNCTION test_record_start();`)
	require.NoError(t, err)
	runFile := filepath.Join(t.TempDir(), "runs")
	// The victim's runs hang, so it holds jobs when it is killed.
	hang := `if [ "$FILA_TEST_WORKER" = victim ]; then sleep 120; else sleep 0.2; fi`
	config := writeConfig(t, fmt.Sprintf(`workers:
  - name: calls
    concurrency: 4
    lease: 2s
    exec:
      call:
        command: %q
        rate_limit: {max: 3, period: 1s, key: account}
`, recordingCommand(runFile, hang)))
	// The victim starts alone, so it surely holds jobs when it is killed;
	// the others join once it does.
	victim := startConfigWorker(t, db, config, "FILA_TEST_WORKER=victim")
	waitWorkersUp(t, db, 1)
	const accounts, perAccount = 2, 21
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'call', jsonb_build_object('account', 'acct-' || (i % $1::int)) FROM generate_series(1, $2::int) i`,
		accounts, accounts*perAccount)
	require.NoError(t, err)

	waitFor(t, 60*time.Second, "the victim runs a job", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs j JOIN fila_workers w ON w.id = j.worker
			WHERE j.state = 'running' AND w.pid = $1::int`, victim.cmd.Process.Pid).Scan(&n)
		return n > 0
	})
	for i := range 2 {
		startConfigWorker(t, db, config, fmt.Sprintf("FILA_TEST_WORKER=w%d", i))
	}
	waitWorkersUp(t, db, 3)
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	_ = victim.cmd.Wait()
	var killedJobs []int64 // every job the victim started: its runs hang
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(s.job_id), '{}') FROM test_starts s JOIN fila_workers w ON w.id = s.worker
		WHERE w.pid = $1::int`, victim.cmd.Process.Pid).Scan(&killedJobs))

	waitFor(t, 120*time.Second, "every call completed", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state = 'completed'").Scan(&n)
		return n == accounts*perAccount
	})

	// The most starts of one account in a one-second window: a window
	// holding the most can be moved to begin at one of its starts.
	var (
		account string
		from    time.Time
		most    int
	)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT s.account, s.started_at, count(*) FROM test_starts s
		JOIN test_starts o ON o.account = s.account AND o.started_at >= s.started_at AND o.started_at < s.started_at + interval '1 second'
		GROUP BY s.job_id, s.attempt, s.account, s.started_at
		ORDER BY count(*) DESC, s.started_at LIMIT 1`).Scan(&account, &from, &most))
	require.LessOrEqual(t, most, 3, "account %s started %d jobs in the second from %s", account, most, from)
	require.Equal(t, 3, most, "some second held three starts of an account: the limit was reached")

	// Attempts may not say so (one whose handler the victim had not yet
	// been seen running is given back by the rescue): the starts do. A
	// lease lost by a survivor on a loaded machine adds starts of its own.
	var starts int
	var first, last time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), min(started_at), max(started_at) FROM test_starts`).Scan(&starts, &first, &last))
	require.GreaterOrEqual(t, starts, accounts*perAccount+len(killedJobs))
	for _, id := range killedJobs {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM test_starts WHERE job_id = $1", id).Scan(&n))
		require.GreaterOrEqual(t, n, 2, "job %d, held by the victim, started again", id)
	}
	ended := map[int64]bool{}
	for _, r := range readRuns(t, runFile) {
		if !r.end.IsZero() {
			ended[r.job] = true
		}
	}
	require.Len(t, ended, accounts*perAccount, "every job's run ended")
	span := last.Sub(first).Seconds()
	t.Logf("%d starts of %d jobs (%d held by the killed process) in %.1fs: %.2f starts/s against a limit of %d/s (3/s for each of %d accounts)",
		starts, accounts*perAccount, len(killedJobs), span, float64(starts)/span, 3*accounts, accounts)
}
