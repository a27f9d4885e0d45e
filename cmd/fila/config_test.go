package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
)

// env is a fixed environment for loadWorkFile.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// writeConfig writes a configuration file into a fresh directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fila.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// The example in docs is loaded as a user would run it, so that it cannot
// fall behind the schema: every key it shows reaches the runtime.
func TestExampleConfigLoads(t *testing.T) {
	t.Parallel()
	wf, err := loadWorkFile("../../docs/fila.example.yaml", env(map[string]string{
		"FILA_DSN":            "postgres://app@pgbouncer:6432/app",
		"FILA_LISTEN_DSN":     "postgres://app@postgres:5432/app",
		"FILA_UI_ADMIN_TOKEN": "s3cret-s3cret-s3cret",
		"FILA_UI_READ_TOKEN":  "r3ad-r3ad-r3ad-r3ad",
	}))
	require.NoError(t, err)
	require.Equal(t, "postgres://app@pgbouncer:6432/app", wf.dsn)
	require.Equal(t, "postgres://app@postgres:5432/app", wf.listenDSN)
	require.Equal(t, 30*time.Second, wf.shutdown)
	require.Equal(t, "127.0.0.1:9090", wf.metricsAddr)
	require.Equal(t, "127.0.0.1:9090", wf.healthAddr)
	require.Equal(t, "127.0.0.1:8080", wf.uiAddr)
	require.Equal(t, "s3cret-s3cret-s3cret", wf.uiAccess.adminToken)
	require.Equal(t, "r3ad-r3ad-r3ad-r3ad", wf.uiAccess.readToken)
	require.False(t, wf.uiAccess.publicRead.set, "shown, commented out: false with no token is refused")
	require.Len(t, wf.groups, 2)

	rt := wf.groups[0]
	require.Equal(t, "realtime", rt.name)
	require.Equal(t, []string{"critical", "mail"}, rt.cfg.Queues)
	require.Equal(t, 10, rt.cfg.Concurrency)
	require.Equal(t, runtime.ModeNotify, rt.cfg.Mode)
	require.Equal(t, 30*time.Second, rt.cfg.Lease, "merged from x-polling")
	require.Equal(t, 30*time.Second, rt.cfg.SafetyPoll, "merged from x-polling")
	require.Equal(t, time.Second, rt.cfg.UnhealthyPoll)
	require.Equal(t, 200, rt.cfg.BusyRate)
	require.Equal(t, 10*time.Second, rt.cfg.ListenerPingInterval)
	require.Equal(t, 3*time.Second, rt.cfg.ListenerPingTimeout)
	require.Equal(t, 10*time.Second, rt.cfg.HeartbeatInterval)
	require.Len(t, rt.execs, 2)
	require.Equal(t, execKind{"send-mail", "./bin/send-mail", 0, nil}, kindOf(rt.execs[0]))
	require.Equal(t, execKind{"charge", "./bin/charge", time.Minute, &runtime.Limit{Max: 2, Key: "account.id"}}, kindOf(rt.execs[1]))
	require.Len(t, rt.cfg.Recurring, 1)
	require.Equal(t, "heartbeat", rt.cfg.Recurring[0].Name, "a task without group goes to the first group")

	batch := wf.groups[1]
	require.Equal(t, "batch", batch.name)
	require.Equal(t, []string{"reports", "exports"}, batch.cfg.Queues)
	require.Equal(t, map[string]int{"exports": 2}, batch.cfg.QueueConcurrency)
	require.Equal(t, 4, batch.cfg.Concurrency)
	require.Equal(t, 5, batch.cfg.MaxConcurrency)
	require.Equal(t, runtime.ModePoll, batch.cfg.Mode)
	require.Equal(t, 2*time.Minute, batch.cfg.Lease, "a group's own key wins over the merged one")
	require.Equal(t, 200*time.Millisecond, batch.cfg.PollMin)
	require.Equal(t, 10*time.Second, batch.cfg.PollMax)
	require.Equal(t, 72*time.Hour, batch.cfg.Retention)
	require.Negative(t, batch.cfg.DeadRetention, "keep")
	require.Equal(t, 100, batch.cfg.ClaimBatch)
	require.Equal(t, 5*time.Second, batch.cfg.RetryBase)
	require.Equal(t, 6*time.Hour, batch.cfg.RetryMax)
	require.Equal(t, 10*time.Second, batch.cfg.HardStopGrace)
	require.Len(t, batch.cfg.Recurring, 1)
	task := batch.cfg.Recurring[0]
	require.Equal(t, "nightly-report", task.Name)
	require.Equal(t, "0 2 * * *", task.Schedule)
	require.Equal(t, "Europe/Lisbon", task.TimeZone)
	require.Equal(t, "reports", task.Queue)
	require.Equal(t, 3, task.MaxAttempts)
	require.Equal(t, runtime.MissedLatest, task.Missed)
	require.Equal(t, int16(1), task.Priority)
	require.Equal(t, []string{"nightly"}, task.Tags)
	require.Equal(t, "nightly-report", task.UniqueKey)
	require.False(t, task.RunOnStart)
	require.JSONEq(t, `{"format": "pdf"}`, string(task.Payload.(json.RawMessage)))

	// Every group is a valid runtime configuration.
	var out bytes.Buffer
	p := &workProcess{}
	for _, g := range wf.groups {
		cfg := g.cfg
		cfg.DSN, cfg.ListenDSN, cfg.Kinds = wf.dsn, wf.listenDSN, execKinds(g.execs, &out)
		p.groups = append(p.groups, groupPlan{name: g.name, cfg: cfg})
	}
	_, err = p.newRuntimes(zap.NewNop(), nil)
	require.NoError(t, err)
}

// execKind is what an execSpec runs.
type execKind struct {
	name, command string
	timeout       time.Duration
	limit         *runtime.Limit
}

// The example shows every key of the file.
func TestExampleShowsEveryKey(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile("../../docs/fila.example.yaml")
	require.NoError(t, err)
	for _, s := range settings {
		if s.key == "" {
			continue
		}
		key := s.key[strings.LastIndex(s.key, ".")+1:]
		require.Regexp(t, `(?m)^ *(# )?(- )?`+key+`:`, string(example), "docs/fila.example.yaml shows %s", s.key)
	}
}

func kindOf(e execSpec) execKind { return execKind{e.name, e.command, e.kindTimeout(), e.kindLimit()} }

// TestConfigCheckThroughTheCommand: --check loads the example with its
// variables set, and prints the groups; the command line's own flags are
// refused beside --config, naming the flag.
func TestConfigCheckThroughTheCommand(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filaBin, "work", "--config", "../../docs/fila.example.yaml", "--check")
	cmd.Env = append(os.Environ(), "FILA_DSN=postgres://app@h/app", "FILA_LISTEN_DSN=postgres://app@h/app", "FILA_UI_ADMIN_TOKEN=t-long-enough-token", "FILA_UI_READ_TOKEN=r-long-enough-token")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "2 worker group(s)")
	require.Contains(t, string(out), "realtime: queues critical,mail, mode notify, concurrency 10, kinds noop,sleep,send-mail,charge, recurring heartbeat (@every 1m)")
	require.Contains(t, string(out), "batch: queues reports,exports, mode poll")

	path := writeConfig(t, "workers:\n  - name: a\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"work", "--config", path, "--concurrency", "3"}, "--concurrency cannot be combined with --config"},
		{[]string{"work", "--config", path, "--exec", "k=true"}, "--exec cannot be combined with --config"},
		{[]string{"work", "--config", path, "--ui-addr", ":0"}, "--ui-addr cannot be combined with --config"},
		{[]string{"work", "--check"}, "--check checks a configuration file: give it with --config"},
		{[]string{"work", "--config", filepath.Join(t.TempDir(), "none.yaml")}, "--config: open "},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"--log-level", "error"}, c.args...), &stdout, &stderr)
		require.Equal(t, 1, code, "%q: %s", c.args, stderr.String())
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%q: one line: %s", c.args, stderr.String())
		require.Contains(t, stderr.String(), "fila work: "+c.want, "%q", c.args)
	}
	withDSN := writeConfig(t, "dsn: ${FILA_TEST_CONFIG_DSN}\nworkers:\n  - name: a\n")
	var stderr bytes.Buffer
	cmd = exec.Command(filaBin, "--dsn", "postgres://x@h/x", "work", "--config", withDSN, "--check")
	cmd.Env = append(os.Environ(), "FILA_TEST_CONFIG_DSN=postgres://y@h/y")
	cmd.Stderr = &stderr
	require.Error(t, cmd.Run())
	require.Contains(t, stderr.String(), "fila work: --dsn cannot be combined with a configuration file that sets dsn")
}

// TestConfigErrorsNameFileLineAndKey: each mistake is one line naming the
// file, the line and the key, before anything connects.
func TestConfigErrorsNameFileLineAndKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text, want string
	}{
		{"unknown key", "workers:\n  - name: a\n    concurency: 3\n",
			":3: workers[0].concurency: unknown key; did you mean concurrency?"},
		{"unknown key far from any", "workers:\n  - name: a\nthreads: 3\n",
			":3: threads: unknown key; known here: dsn, listen_dsn, schema, shutdown_timeout"},
		{"bad value", "workers:\n  - name: a\n  - name: b\n    concurrency: 0\n",
			":4: workers[1].concurrency: 0 is out of range: allowed 1 to 10000"},
		{"literal DSN", "dsn: postgres://app:secret@db/app\nworkers: [{name: a}]\n",
			":1: dsn: give a reference to an environment variable, such as ${FILA_DSN}, not the value itself"},
		{"literal DSN of a group", "workers:\n  - name: a\n    listen_dsn: postgres://app@db/app\n",
			":3: workers[0].listen_dsn: give a reference to an environment variable"},
		{"unset variable", "dsn: ${FILA_TEST_SURELY_UNSET}\nworkers: [{name: a}]\n",
			":1: dsn: environment variable FILA_TEST_SURELY_UNSET is not set"},
		{"unset variable, short form", "workers: [{name: a}]\nui_addr: :0\nui_admin_token: $FILA_TEST_SURELY_UNSET\n",
			":3: ui_admin_token: environment variable FILA_TEST_SURELY_UNSET is not set"},
		{"duration without unit", "workers:\n  - name: a\n    lease: 30\n",
			`:3: workers[0].lease: "30" is not a duration: write a number and its unit`},
		{"duration out of range", "workers:\n  - name: a\n    safety_poll: 100ms\n",
			":3: workers[0].safety_poll: 100ms is out of range: allowed 1s to 10m"},
		{"poll_max below poll_min", "workers:\n  - name: a\n    poll_max: 100ms\n    poll_min: 200ms\n",
			":3: workers[0].poll_max: 100ms is out of range: allowed 200ms to 10m"},
		{"mode", "workers:\n  - name: a\n    mode: smoke\n",
			`:3: workers[0].mode: "smoke" is not one of notify, poll, wal`},
		{"a number as text", "workers:\n  - name: a\n    concurrency: \"5\"\n",
			`:3: workers[0].concurrency: want a whole number, got "5"`},
		{"queue name", "workers:\n  - name: a\n    queues: [mail, has space]\n",
			`:3: workers[0].queues[1]: queue name "has space" may contain only`},
		{"queue twice", "workers:\n  - name: a\n    queues: [mail, {name: mail, concurrency: 2}]\n",
			":3: workers[0].queues[1].name: queue mail is listed twice"},
		{"queue concurrency", "workers:\n  - name: a\n    queues:\n      - name: mail\n        concurrency: 10001\n",
			":5: workers[0].queues[0].concurrency: 10001 is out of range: allowed 1 to 10000"},
		{"max_concurrency", "workers:\n  - name: a\n    queues: [a, b]\n    max_concurrency: 20001\n",
			":4: workers[0].max_concurrency: 20001 is out of range: allowed 0 (no cap) to 20000"},
		{"group without name", "workers:\n  - queues: [a]\n",
			":2: workers[0]: a group needs a name"},
		{"group name", "workers:\n  - name: \"two words\"\n",
			`:2: workers[0].name: "two words": use 1 to 63 letters`},
		{"group twice", "workers:\n  - name: a\n  - name: a\n",
			":3: workers[1]: group a is declared twice (first at line 2)"},
		{"key twice", "workers:\n  - name: a\n    lease: 2s\n    lease: 3s\n",
			":4: workers[0].lease: given twice (first at line 3)"},
		{"exec built-in", "workers:\n  - name: a\n    exec:\n      noop: ./x\n",
			":4: workers[0].exec.noop: noop is a built-in kind"},
		{"exec without command", "workers:\n  - name: a\n    exec:\n      k:\n        timeout: 1s\n",
			":5: workers[0].exec.k: no command"},
		{"exec timeout", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        timeout: -1s\n",
			":6: workers[0].exec.k.timeout: -1s is negative: must be above 0"},
		{"limit max", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        limit: {max: 0, key: account}\n",
			":6: workers[0].exec.k.limit.max: 0 is out of range: allowed 1 to 2147483647"},
		{"limit key", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        limit: {max: 1, key: account..id}\n",
			`:6: workers[0].exec.k.limit.key: "account..id": want a dotted path`},
		{"rate_limit max", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        rate_limit: {max: 0, period: 1s}\n",
			":6: workers[0].exec.k.rate_limit.max: 0 is out of range: allowed 1 to 2147483647"},
		{"rate_limit period", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        rate_limit: {max: 1, period: 1000h}\n",
			":6: workers[0].exec.k.rate_limit.period: 1000h is out of range: allowed 1ms to 720h"},
		{"rate_limit without period", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        rate_limit: {max: 1}\n",
			":6: workers[0].exec.k.rate_limit: no period"},
		{"rate_limit key", "workers:\n  - name: a\n    exec:\n      k:\n        command: ./k\n        rate_limit: {max: 1, period: 1s, key: .id}\n",
			`:6: workers[0].exec.k.rate_limit.key: ".id": want a dotted path`},
		{"rate limits that differ", "workers:\n  - name: a\n    exec:\n      k: {command: ./k, rate_limit: {max: 1, period: 1s}}\n  - name: b\n    queues: [other]\n    exec:\n      k: {command: ./k, rate_limit: {max: 1, period: 2s}}\n",
			":8: workers[1].exec.k: kind k has another limit in group a"},
		{"limits that differ", "workers:\n  - name: a\n    exec:\n      k: {command: ./k, limit: {max: 1}}\n  - name: b\n    queues: [other]\n    exec:\n      k: {command: ./k, limit: {max: 2}}\n",
			":8: workers[1].exec.k: kind k has another limit in group a"},
		{"retention zero", "workers:\n  - name: a\n    retention: 0s\n",
			`:3: workers[0].retention: want a duration above 0 such as 72h, or keep`},
		{"busy_rate", "workers:\n  - name: a\n    busy_rate: 0\n",
			":3: workers[0].busy_rate: 0 is out of range: allowed 1 and up (jobs a second), or off"},
		{"schedule", "workers: [{name: a}]\nrecurring:\n  - name: t\n    kind: noop\n    schedule: \"* * *\"\n",
			`:5: recurring[0].schedule: schedule "* * *": expected exactly 5 fields`},
		{"every below a second", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@every 500ms\"}\n",
			`:3: recurring[0].schedule: schedule "@every 500ms": want @every and a whole number of seconds`},
		{"time zone", "workers: [{name: a}]\nrecurring:\n  - name: t\n    kind: noop\n    schedule: \"@daily\"\n    time_zone: Mars/Base\n",
			`:6: recurring[0].time_zone: "Mars/Base" is not a time zone`},
		{"task's group", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", group: b}\n",
			":3: recurring[0].group: no group is named b"},
		{"task's priority", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", priority: 40000}\n",
			":3: recurring[0].priority: 40000 is out of range: allowed -32768 to 32767"},
		{"task's tag", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", tags: [\"\"]}\n",
			":3: recurring[0].tags[0]: is empty"},
		{"task's run_on_start", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", run_on_start: yes please}\n",
			":3: recurring[0].run_on_start: want true or false"},
		{"task twice", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\"}\n  - {name: t, kind: noop, schedule: \"@hourly\"}\n",
			":4: recurring[1].name: task t is declared twice (first at line 3)"},
		{"task without kind", "workers: [{name: a}]\nrecurring:\n  - {name: t, schedule: \"@daily\"}\n",
			":3: recurring[0]: no kind: a recurring task needs one"},
		{"missed", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", missed: all}\n",
			`:3: recurring[0].missed: "all" is not one of latest, none`},
		{"max_attempts", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", max_attempts: 0}\n",
			":3: recurring[0].max_attempts: 0 is out of range: allowed 1 to 1000"},
		{"payload", "workers: [{name: a}]\nrecurring:\n  - {name: t, kind: noop, schedule: \"@daily\", payload: {n: .inf}}\n",
			":3: recurring[0].payload.n: .inf has no JSON form"},
		{"token without dashboard", "workers: [{name: a}]\nui_admin_token: ${FILA_TEST_SURELY_UNSET:-}\n",
			":2: ui_admin_token: there is no dashboard to protect: set ui_addr too"},
		{"address", "workers: [{name: a}]\nmetrics_addr: 9090\n",
			`:2: metrics_addr: "9090": want HOST:PORT`},
		{"no workers", "dsn: ${HOME}\n",
			":1: no workers: declare at least one group under workers:"},
		{"workers not a list", "workers:\n  name: a\n",
			":2: workers: want a list, got a mapping"},
		{"syntax", "workers:\n  - name: [a\n", ":"},
		{"tab", "workers:\n\t- name: a\n", ":2: a tab indents this line: YAML indents with spaces only"},
		{"tab after a dash", "workers:\n  -\tname: a\n", ":2: a tab indents this line"},
		{"tab deeper", "workers:\n  - name: a\n    \tlease: 3s\n", ":3: a tab indents this line"},
		{"empty", "# nothing yet\n", ": the file is empty"},
		{"two documents", "workers: [{name: a}]\n---\nworkers: [{name: b}]\n",
			":2: a second YAML document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, c.text)
			var stdout, stderr bytes.Buffer
			code := run([]string{"--dsn", "postgres://postgres@127.0.0.1:1/nowhere", "work", "--config", path, "--check"}, &stdout, &stderr)
			require.Equal(t, 1, code, stderr.String())
			require.Empty(t, stdout.String())
			require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %s", stderr.String())
			require.Contains(t, stderr.String(), "fila work: "+path+c.want, c.text)
		})
	}
}

// TestConfigDashboardAccess: the dashboard's tokens are references, at
// least ui.TokenMinLen long, and an error names the file, line and key.
func TestConfigDashboardAccess(t *testing.T) {
	t.Parallel()
	vars := env(map[string]string{"SHORT": "s3cret", "LONG": "a-token-long-enough", "OTHER": "another-long-token"})
	for _, c := range []struct{ text, want string }{
		{"workers: [{name: a}]\nui_addr: :0\nui_admin_token: ${SHORT}\n",
			":3: ui_admin_token: the token is 6 characters long: at least 16 are needed"},
		{"workers: [{name: a}]\nui_addr: :0\nui_read_token: ${SHORT}\n",
			":3: ui_read_token: the token is 6 characters long: at least 16 are needed"},
		{"workers: [{name: a}]\nui_read_token: ${LONG}\n",
			":2: ui_read_token: there is no dashboard to protect: set ui_addr too"},
		{"workers: [{name: a}]\nui_addr: :0\nui_public_read: \"yes\"\n",
			`:3: ui_public_read: want true or false, got "yes"`},
		{"workers: [{name: a}]\nui_public_read: true\n",
			":2: ui_public_read: there is no dashboard to open: set ui_addr too"},
	} {
		_, err := loadWorkFile(writeConfig(t, c.text), vars)
		require.ErrorContains(t, err, c.want, c.text)
	}
	path := writeConfig(t, "workers: [{name: a}]\nui_addr: :0\nui_admin_token: ${LONG}\nui_read_token: ${OTHER}\nui_public_read: true\n")
	wf, err := loadWorkFile(path, vars)
	require.NoError(t, err)
	require.Equal(t, uiAccess{adminToken: "a-token-long-enough", adminFrom: path + ":3: ui_admin_token",
		readToken: "another-long-token", readFrom: path + ":4: ui_read_token",
		publicRead: optionalBool{value: true, set: true}, publicFrom: path + ":5: ui_public_read"}, wf.uiAccess)

	// The same token twice, and no token with ui_public_read: false, are
	// refused when the process starts, naming the keys.
	path = writeConfig(t, "workers: [{name: a}]\nui_addr: :0\nui_admin_token: ${LONG}\nui_read_token: ${LONG}\n")
	wf, err = loadWorkFile(path, vars)
	require.NoError(t, err)
	require.EqualError(t, wf.uiAccess.resolve(vars),
		path+":4: ui_read_token is the same token as "+path+":3: ui_admin_token: give readers a token of their own")
	path = writeConfig(t, "workers: [{name: a}]\nui_addr: :0\nui_public_read: false\n")
	wf, err = loadWorkFile(path, vars)
	require.NoError(t, err)
	require.ErrorContains(t, wf.uiAccess.resolve(vars), path+":3: ui_public_read=false needs a token to log in with")
	require.ErrorContains(t, (&uiAccess{adminFrom: "$FILA_UI_ADMIN_TOKEN"}).resolve(env(map[string]string{"FILA_UI_ADMIN_TOKEN": "x"})),
		"$FILA_UI_ADMIN_TOKEN: the token is 1 character long: at least 16 are needed")
}

// A payload is written as the JSON of what the file says: text stays
// text (a date too), numbers stay numbers, keys are text. The words that
// stand for a setting (off, keep) are read as such.
func TestConfigPayloadIsJSON(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `workers: [{name: a, busy_rate: off, retention: keep}]
x-common: &common {source: fila}
recurring:
  - name: t
    kind: noop
    schedule: "@hourly"
    payload:
      <<: *common
      day: 2026-01-31
      n: 3
      ratio: 0.5
      on: true
      none: ~
      1: one
      list: [a, 2, {b: c}]
`)
	wf, err := loadWorkFile(path, env(nil))
	require.NoError(t, err)
	require.Negative(t, wf.groups[0].cfg.BusyRate, "off: always wait for notifications")
	require.Negative(t, wf.groups[0].cfg.Retention, "keep")
	raw := wf.groups[0].cfg.Recurring[0].Payload.(json.RawMessage)
	require.JSONEq(t, `{"source": "fila", "day": "2026-01-31", "n": 3, "ratio": 0.5, "on": true, "none": null,
		"1": "one", "list": ["a", 2, {"b": "c"}]}`, string(raw))
}

// The shipped example passes --check with only FILA_DSN set: its listen
// DSN and admin token are optional references.
func TestExampleChecksWithOnlyTheDSN(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filaBin, "work", "--config", "../../docs/fila.example.yaml", "--check")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FILA_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "FILA_DSN=postgres://app@h/app")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "2 worker group(s)")
}

// ${NAME:-} may be unset, and the key is then as if left out (a listen
// DSN then is the DSN); ${NAME:-DEFAULT} stands for DEFAULT, which may not
// hold a password; ${NAME} must still be set.
func TestOptionalReferences(t *testing.T) {
	t.Parallel()
	load := func(text string, vars map[string]string) (*workConfig, error) {
		return loadWorkFile(writeConfig(t, text), env(vars))
	}
	wf, err := load("dsn: ${D}\nlisten_dsn: ${L:-}\nui_addr: :0\nui_admin_token: ${T:-}\nworkers: [{name: a}]\n",
		map[string]string{"D": "postgres://app@h/app", "L": ""})
	require.NoError(t, err)
	require.Equal(t, "postgres://app@h/app", wf.dsn)
	require.Empty(t, wf.listenDSN, "left out: the DSN is used")
	require.Empty(t, wf.uiAccess.adminToken)
	require.Equal(t, "$FILA_UI_ADMIN_TOKEN", wf.uiAccess.adminFrom, "left out: taken from the environment at start")

	wf, err = load("dsn: ${D:-postgres://app@db/app}\nworkers: [{name: a}]\n", nil)
	require.NoError(t, err)
	require.Equal(t, "postgres://app@db/app", wf.dsn)
	wf, err = load("dsn: ${D:-postgres://app@db/app}\nworkers: [{name: a}]\n", map[string]string{"D": "postgres://x@y/z"})
	require.NoError(t, err)
	require.Equal(t, "postgres://x@y/z", wf.dsn, "the variable wins when set")

	// A listen DSN left out is the file's dsn, or --listen-dsn.
	for _, c := range []struct{ flag, want string }{{"", "postgres://x@y/z"}, {"postgres://direct@pg/z", "postgres://direct@pg/z"}} {
		p, err := wf.process(&globals{listenDSN: c.flag}, io.Discard)
		require.NoError(t, err)
		require.Equal(t, c.want, p.groups[0].cfg.ListenDSN, "--listen-dsn %q", c.flag)
	}

	for _, c := range []struct{ text, want string }{
		{"dsn: ${D:-postgres://app:pw@db/app}\nworkers: [{name: a}]\n", ":1: dsn: the default of D: holds a password"},
		{"dsn: ${D:-host=db password=pw}\nworkers: [{name: a}]\n", ":1: dsn: the default of D: holds a password"},
		{"ui_addr: :0\nui_admin_token: ${T:-s3cret}\nworkers: [{name: a}]\n", ":2: ui_admin_token: a default is a value written in the file: use ${T:-} for none"},
		{"dsn: ${D}\nworkers: [{name: a}]\n", ":1: dsn: environment variable D is not set (write ${D:-} if it may be)"},
	} {
		_, err := load(c.text, nil)
		require.ErrorContains(t, err, c.want, c.text)
	}
}

// --check refuses what would fail only at start, or be left to chance:
// two servers on one address (but metrics and health, which one server
// answers), and a kind run otherwise by two groups on the same queue.
func TestCheckRefusesWhatFailsAtStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ text, want string }{
		{"workers: [{name: a}]\nmetrics_addr: 127.0.0.1:9090\nui_addr: 127.0.0.1:9090\n",
			":3: ui_addr: 127.0.0.1:9090 is metrics_addr's too: one of them could not listen; only metrics_addr and health_addr may share an address (the same one)"},
		{"workers: [{name: a}]\nhealth_addr: 127.0.0.1:8080\nui_addr: 127.0.0.1:8080\n",
			":3: ui_addr: 127.0.0.1:8080 is health_addr's too"},
		{"workers: [{name: a}]\nmetrics_addr: 127.0.0.1:9090\nhealth_addr: :9090\n",
			":3: health_addr: :9090 takes the port of metrics_addr 127.0.0.1:9090"},
		{"workers:\n  - name: a\n    exec: {k: ./a}\n  - name: b\n    exec: {k: ./b}\n",
			":5: workers[1].exec.k: kind k runs otherwise in group a, which works queue default too: which group claims a job would decide how it runs"},
		{"workers:\n  - name: a\n    queues: [x, y]\n    exec: {k: ./k}\n  - name: b\n    queues: [y]\n    exec: {k: {command: ./k, timeout: 1s}}\n",
			":7: workers[1].exec.k: kind k runs otherwise in group a, which works queue y too"},
	} {
		lines := workErrors(t, "--config", writeConfig(t, c.text), "--check")
		require.Len(t, lines, 1, c.text)
		require.Contains(t, lines[0], c.want, c.text)
	}
	require.Equal(t, []string{"fila work: --ui-addr: 127.0.0.1:9090 is --metrics-addr's too: one of them could not listen; only --metrics-addr and --health-addr may share an address (the same one)"},
		workErrors(t, "--metrics-addr", "127.0.0.1:9090", "--ui-addr", "127.0.0.1:9090"))

	// The dashboard's access, tokens from the environment included.
	for _, c := range []struct{ text, want string }{
		{"workers: [{name: a}]\nui_addr: :0\nui_admin_token: ${FILA_TEST_TOKEN}\nui_read_token: ${FILA_TEST_TOKEN}\n",
			":4: ui_read_token is the same token as "},
		{"workers: [{name: a}]\nui_addr: :0\nui_public_read: false\n", ":3: ui_public_read=false needs a token to log in with"},
	} {
		cmd := exec.Command(filaBin, "--dsn", "postgres://app@h/app", "work", "--config", writeConfig(t, c.text), "--check")
		cmd.Env = append(os.Environ(), "FILA_TEST_TOKEN=a-token-long-enough")
		out, err := cmd.CombinedOutput()
		require.Error(t, err, c.text)
		require.Contains(t, string(out), c.want, c.text)
	}

	// What is intended passes: metrics and health on one address, port 0
	// twice (each gets a free one), one kind run alike by two groups, or
	// otherwise on queues of their own.
	for _, text := range []string{
		"workers: [{name: a}]\nmetrics_addr: 127.0.0.1:9090\nhealth_addr: 127.0.0.1:9090\nui_addr: 127.0.0.1:8080\n",
		"workers: [{name: a}]\nmetrics_addr: 127.0.0.1:0\nui_addr: 127.0.0.1:0\n",
		"workers: [{name: a}]\nmetrics_addr: 127.0.0.1:9090\nui_addr: 127.0.0.2:9090\n",
		"workers:\n  - name: a\n    exec: {k: ./k}\n  - name: b\n    exec: {k: ./k}\n",
		"workers:\n  - name: a\n    exec: {k: ./a}\n  - name: b\n    queues: [other]\n    exec: {k: ./b}\n",
	} {
		cmd := exec.Command(filaBin, "--dsn", "postgres://app@h/app", "work", "--config", writeConfig(t, text), "--check")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s", text, out)
	}
}
