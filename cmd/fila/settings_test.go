package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// fileOnly are the runtime.Config fields a file sets and no flag does.
var fileOnly = []string{"Recurring"}

// Every field of runtime.Config (and of a Kind) is set by a setting, or is
// Go-only with a reason; every setting with a field is both a flag and a
// key of the file, but the file-only ones.
func TestEveryFieldIsASettingOrGoOnly(t *testing.T) {
	t.Parallel()
	fields := map[string]*setting{}
	for i, s := range settings {
		for _, f := range strings.Split(s.field, ", ") {
			if f != "" {
				require.Nil(t, fields[f], "%s is set by two settings", f)
				fields[f] = &settings[i]
			}
		}
	}
	var all []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[runtime.Config]()) {
		all = append(all, f.Name)
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[runtime.Kind]()) {
		all = append(all, "Kinds."+f.Name)
	}
	for _, name := range all {
		s, set := fields[name]
		reason, goOnly := goOnly[name]
		switch {
		case set && goOnly:
			t.Errorf("%s is set by %s but listed as Go-only", name, s.key)
		case goOnly:
			require.NotEmpty(t, reason, name)
		case !set && name != "Kinds":
			t.Errorf("runtime.Config's %s is no setting's: add one, or list it in goOnly with the reason", name)
		case set && (s.flag == "" || s.key == "") && !slices.Contains(fileOnly, name):
			t.Errorf("%s is reachable only from one side: flag %q, key %q", name, s.flag, s.key)
		}
		delete(fields, name)
	}
	require.Empty(t, fields, "settings name fields runtime.Config does not have")
	for name := range goOnly {
		require.Contains(t, all, name, "goOnly names a field runtime.Config does not have")
	}
}

// bothWays gives every setting that has a flag once on the command line
// and once in a file, with the same values, none its default.
var bothWays = []struct {
	flags []string
	key   string // the file's line, in a group unless top
	top   bool
}{
	{[]string{"--dsn", "postgres://app@db/app"}, "dsn: ${D}", true},
	{[]string{"--listen-dsn", "postgres://app@pg/app"}, "listen_dsn: ${L}", true},
	{[]string{"--schema", "app_a"}, "schema: app_a", true},
	{[]string{"--shutdown-timeout", "1m"}, "shutdown_timeout: 1m", true},
	{[]string{"--metrics-addr", "127.0.0.1:9091"}, "metrics_addr: 127.0.0.1:9091", true},
	{[]string{"--health-addr", "127.0.0.1:9092"}, "health_addr: 127.0.0.1:9092", true},
	{[]string{"--ui-addr", "127.0.0.1:8081"}, "ui_addr: 127.0.0.1:8081", true},
	{[]string{"--admin-token", "s3cret-s3cret-s3cret"}, "ui_admin_token: ${T}", true},
	{[]string{"--read-token", "r3ad-r3ad-r3ad-r3ad"}, "ui_read_token: ${R}", true},
	{[]string{"--public-read"}, "ui_public_read: true", true},
	{[]string{"--otel"}, "otel: true", true},
	{[]string{"--queue", "mail=5", "--queue", "reports"}, "queues: [{name: mail, concurrency: 5}, reports]", false},
	{[]string{"--exec", "k=./k", "--timeout", "k=30s", "--limit", "k=2:account.id", "--rate-limit", "k=10/1s:account.id"},
		"exec: {k: {command: ./k, timeout: 30s, limit: {max: 2, key: account.id}, rate_limit: {max: 10, period: 1s, key: account.id}}}", false},
	{[]string{"--concurrency", "7"}, "concurrency: 7", false},
	{[]string{"--max-concurrency", "9"}, "max_concurrency: 9", false},
	{[]string{"--mode", "poll"}, "mode: poll", false},
	{[]string{"--lease", "1m"}, "lease: 1m", false},
	{[]string{"--heartbeat-interval", "12s"}, "heartbeat_interval: 12s", false},
	{[]string{"--safety-poll", "40s"}, "safety_poll: 40s", false},
	{[]string{"--unhealthy-poll", "2s"}, "unhealthy_poll: 2s", false},
	{[]string{"--poll-min", "100ms"}, "poll_min: 100ms", false},
	{[]string{"--poll-max", "5s"}, "poll_max: 5s", false},
	{[]string{"--busy-rate", "off"}, "busy_rate: off", false},
	{[]string{"--claim-batch", "50"}, "claim_batch: 50", false},
	{[]string{"--retry-base", "2s"}, "retry_base: 2s", false},
	{[]string{"--retry-max", "2h"}, "retry_max: 2h", false},
	{[]string{"--retention", "keep"}, "retention: keep", false},
	{[]string{"--dead-retention", "48h"}, "dead_retention: 48h", false},
	{[]string{"--listener-ping-interval", "20s"}, "listener_ping_interval: 20s", false},
	{[]string{"--listener-ping-timeout", "5s"}, "listener_ping_timeout: 5s", false},
	{[]string{"--liveness-interval", "2s"}, "liveness_interval: 2s", false},
	{[]string{"--hard-stop-grace", "9s"}, "hard_stop_grace: 9s", false},
}

// plainKinds are a group's kinds without their handlers, which cannot be
// compared.
func plainKinds(cfg *runtime.Config) []runtime.Kind {
	kinds := cfg.Kinds
	cfg.Kinds = nil
	for i := range kinds {
		kinds[i].Handler = nil
	}
	return kinds
}

// The flags and the file reach every setting, and build the same runtime
// configuration and process from the same values.
func TestFlagsAndFileBuildTheSame(t *testing.T) {
	t.Parallel()
	var args []string
	top, group := "", ""
	for _, b := range bothWays {
		args = append(args, b.flags...)
		if b.top {
			top += b.key + "\n"
		} else {
			group += "    " + b.key + "\n"
		}
	}
	for _, s := range settings {
		if s.flag != "" {
			require.Contains(t, args, "--"+s.flag, "bothWays gives every flag")
		}
	}

	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	g := &globals{}
	g.addFlags(fs)
	flags := addSettingFlags(fs)
	require.NoError(t, fs.Parse(args))
	fromFlags, err := readFlags(flags)
	require.NoError(t, err)
	byFlags, err := fromFlags.process(g, io.Discard)
	require.NoError(t, err)

	path := writeConfig(t, top+"workers:\n  - name: a\n"+group)
	fromFile, err := loadWorkFile(path, env(map[string]string{
		"D": "postgres://app@db/app", "L": "postgres://app@pg/app", "T": "s3cret-s3cret-s3cret", "R": "r3ad-r3ad-r3ad-r3ad"}))
	require.NoError(t, err)
	byFile, err := fromFile.process(&globals{}, io.Discard)
	require.NoError(t, err)

	want, got := byFlags.groups[0].cfg, byFile.groups[0].cfg
	require.Equal(t, plainKinds(&want), plainKinds(&got))
	require.Equal(t, want, got)
	for _, p := range []*workProcess{byFlags, byFile} {
		p.groups, p.names = nil, nil
		p.uiAccess.adminFrom, p.uiAccess.readFrom, p.uiAccess.publicFrom = "", "", "" // a flag, or the file's line
	}
	require.Equal(t, byFlags, byFile)
	require.Equal(t, uiAccess{adminToken: "s3cret-s3cret-s3cret", readToken: "r3ad-r3ad-r3ad-r3ad", publicRead: optionalBool{value: true, set: true}}, byFile.uiAccess)

	// Each value took: none is a default.
	defaults := runtime.Config{}.WithDefaults()
	cfg, def := reflect.ValueOf(want), reflect.ValueOf(defaults)
	for _, s := range settings {
		for _, f := range strings.Split(s.field, ", ") {
			if f == "" || strings.HasPrefix(f, "Kinds") || slices.Contains(fileOnly, f) {
				continue
			}
			require.NotEqual(t, def.FieldByName(f).Interface(), cfg.FieldByName(f).Interface(), "%s keeps its default", f)
		}
	}
}

// workErrors runs fila work and returns its error lines.
func workErrors(t *testing.T, args ...string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"--dsn", "postgres://postgres@127.0.0.1:1/nowhere", "--log-level", "error", "work"}, args...), &stdout, &stderr)
	require.Equal(t, 1, code, "%q: %s", args, stderr.String())
	return strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
}

// One validation: the same mistake is named as the user wrote it, flag or
// key, never by a Go field; every mistake is reported, each on a line.
func TestOneValidationNamesWhatTheUserWrote(t *testing.T) {
	t.Parallel()
	// --poll-max 20m passed the flag check and failed in runtime.New,
	// naming PollMax.
	require.Equal(t, []string{"fila work: --poll-max: 20m is out of range: allowed 50ms to 10m (from --poll-min)"},
		workErrors(t, "--poll-max", "20m"))
	path := writeConfig(t, "workers:\n  - name: a\n    poll_max: 20m\n")
	require.Equal(t, []string{"fila work: " + path + ":3: workers[0].poll_max: 20m is out of range: allowed 50ms to 10m (from poll_min)"},
		workErrors(t, "--config", path, "--check"))

	// A Limit.Max beyond the claim's int4 is refused both ways.
	require.Equal(t, []string{"fila work: --limit k=4294967297: 4294967297 is out of range: allowed 1 to 2147483647"},
		workErrors(t, "--exec", "k=./k", "--limit", "k=4294967297"))
	path = writeConfig(t, "workers:\n  - name: a\n    exec:\n      k: {command: ./k, limit: {max: 4294967297}}\n")
	require.Equal(t, []string{"fila work: " + path + ":4: workers[0].exec.k.limit.max: 4294967297 is out of range: allowed 1 to 2147483647"},
		workErrors(t, "--config", path, "--check"))

	// --rate-limit's mistakes, each naming the flag as written.
	for _, c := range []struct{ arg, want string }{
		{"k", "--rate-limit k: want KIND=N/PERIOD or KIND=N/PERIOD:PATH"},
		{"k=10", "--rate-limit k=10: want KIND=N/PERIOD or KIND=N/PERIOD:PATH"},
		{"k=10/soon", "--rate-limit k=10/soon: want KIND=N/PERIOD or KIND=N/PERIOD:PATH"},
		{"k=0/1s", "--rate-limit k=0/1s: 0 is out of range: allowed 1 to 2147483647"},
		{"k=10/0s", "--rate-limit k=10/0s: 0s is out of range: allowed 1ms to 720h"},
		{"k=10/1s:account..id", `--rate-limit k=10/1s:account..id: "account..id": want a dotted path`},
		{"j=10/1s", `--rate-limit j=10/1s: no kind "j" is handled (add --exec j=COMMAND)`},
	} {
		errs := workErrors(t, "--exec", "k=./k", "--rate-limit", c.arg)
		require.Len(t, errs, 1, c.arg)
		require.Contains(t, errs[0], "fila work: "+c.want, c.arg)
	}
	require.Equal(t, []string{"fila work: --rate-limit k=2/1s: kind k is given twice"},
		workErrors(t, "--exec", "k=./k", "--rate-limit", "k=1/1s", "--rate-limit", "k=2/1s"))

	// Every mistake, in the file's order.
	path = writeConfig(t, `workers:
  - name: a
    concurency: 3
    lease: 5
    queues: [mail, mail]
  - name: b
    heartbeat_interval: 20s
    exec:
      k: {command: ./k, timeout: -1s}
`)
	require.Equal(t, []string{
		"fila work: " + path + ":3: workers[0].concurency: unknown key; did you mean concurrency?",
		"fila work: " + path + `:4: workers[0].lease: "5" is not a duration: write a number and its unit, such as 500ms, 30s or 2m`,
		"fila work: " + path + ":5: workers[0].queues[1]: queue mail is listed twice",
		"fila work: " + path + ":7: workers[1].heartbeat_interval: 20s is out of range: allowed above 0 to 15s (half of lease)",
		"fila work: " + path + ":9: workers[1].exec.k.timeout: -1s is negative: must be above 0",
	}, workErrors(t, "--config", path, "--check"))
	require.Equal(t, []string{
		`fila work: --lease: "5" is not a duration: write a number and its unit, such as 500ms, 30s or 2m`,
		"fila work: --heartbeat-interval: 20s is out of range: allowed above 0 to 15s (half of --lease)",
		"fila work: --timeout ok=-1s: -1s is negative: must be above 0",
	}, workErrors(t, "--lease", "5", "--heartbeat-interval", "20s", "--exec", "ok=true", "--timeout", "ok=-1s"))
}

// Each setting's range is runtime.Config's: what the check lets through at
// either end, runtime.New takes; one step beyond, the check refuses.
func TestTheCheckAndTheRuntimeAgree(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flag                 string
		lo, hi, below, above string
		with                 []string
	}{
		{"--concurrency", "1", "10000", "0", "10001", nil},
		{"--max-concurrency", "0", "20000", "-1", "20001", []string{"--queue", "a", "--queue", "b"}},
		{"--lease", "500ms", "1h", "499ms", "1h0m0.001s", []string{"--heartbeat-interval", "1ms"}},
		{"--heartbeat-interval", "1ns", "15s", "0", "15.001s", nil},
		{"--safety-poll", "1s", "10m", "999ms", "10m1ms", []string{"--unhealthy-poll", "1s"}},
		{"--unhealthy-poll", "10ms", "30s", "9ms", "31s", nil},
		{"--poll-min", "1ms", "1m", "0", "1m1ms", []string{"--poll-max", "1m"}},
		{"--poll-max", "50ms", "10m", "49ms", "10m1ms", nil},
		{"--busy-rate", "1", "2147483647", "0", "2147483648", nil},
		{"--claim-batch", "1", "10000", "0", "10001", nil},
		{"--retry-base", "1ns", "1h", "0", "1h1ms", nil},
		{"--retry-max", "1s", "720h", "999ms", "720h1ms", nil},
		{"--retention", "1ns", "1000000h", "0", "", nil},
		{"--dead-retention", "1ns", "1000000h", "0", "", nil},
		{"--listener-ping-interval", "100ms", "10m", "99ms", "10m1ms", nil},
		{"--listener-ping-timeout", "100ms", "1m", "99ms", "1m1ms", nil},
		{"--hard-stop-grace", "1ns", "1000h", "0", "", nil},
		{"--queue", "q=1", "q=10000", "q=0", "q=10001", nil},
		{"--limit", "k=1", "k=2147483647", "k=0", "k=2147483648", []string{"--exec", "k=./k"}},
		{"--timeout", "k=1ns", "k=1000h", "k=0", "", []string{"--exec", "k=./k"}},
	} {
		build := func(v string) (*workProcess, error) {
			fs := flag.NewFlagSet("work", flag.ContinueOnError)
			flags := addSettingFlags(fs)
			require.NoError(t, fs.Parse(append(slices.Clone(c.with), c.flag, v)))
			w, err := readFlags(flags)
			if err != nil {
				return nil, err
			}
			return w.process(&globals{dsn: "postgres://app@db/app"}, io.Discard)
		}
		for _, v := range []string{c.lo, c.hi} {
			p, err := build(v)
			require.NoError(t, err, "%s %s", c.flag, v)
			_, err = p.newRuntimes(nil, nil)
			require.NoError(t, err, "runtime.New takes %s %s", c.flag, v)
		}
		for _, v := range []string{c.below, c.above} {
			if v != "" {
				_, err := build(v)
				require.ErrorContains(t, err, c.flag, "%s %s is refused", c.flag, v)
			}
		}
	}
}

// settingsDoc is the document that holds the table of settings, from this
// package's directory.
const settingsDoc = "../../docs/configuration.md"

var updateREADME = flag.Bool("update-readme", false, "rewrite the table of settings of docs/configuration.md from settings.go")

// The table of settings of the configuration guide is settings.go's,
// generated.
func TestREADMEShowsEverySetting(t *testing.T) {
	t.Parallel()
	const begin, end = "<!-- settings: from cmd/fila/settings.go; go test ./cmd/fila -run README -update-readme -->\n", "<!-- /settings -->\n"
	readme, err := os.ReadFile(settingsDoc)
	require.NoError(t, err)
	before, rest, ok := strings.Cut(string(readme), begin)
	require.True(t, ok, "%s marks its table of settings", settingsDoc)
	_, after, ok := strings.Cut(rest, end)
	require.True(t, ok)
	want := settingsTable()
	if *updateREADME {
		require.NoError(t, os.WriteFile(settingsDoc, []byte(before+begin+want+end+after), 0o644))
		return
	}
	require.Equal(t, want, rest[:len(rest)-len(end)-len(after)], "run: go test ./cmd/fila -run README -update-readme")
}

// settingsTable is the configuration guide's table of settings, and the
// Go-only fields.
func settingsTable() string {
	cell := func(s, or string) string {
		if s == "" {
			return or
		}
		return strings.ReplaceAll(s, "|", `\|`)
	}
	code := func(s string) string {
		if s == "" {
			return "—"
		}
		return "`" + s + "`"
	}
	var b strings.Builder
	b.WriteString("| flag | file key | `runtime.Config` | value | default | meaning |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, s := range settings {
		flagName := ""
		if s.flag != "" {
			flagName = "--" + s.flag
		}
		var fields []string
		for _, f := range strings.Split(s.field, ", ") {
			fields = append(fields, code(f))
		}
		value := "`" + s.arg + "`"
		if s.allowed != "" {
			value += ": " + s.allowed
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", code(flagName), code(s.key), strings.Join(fields, ", "),
			cell(value, ""), cell(s.def, "—"), cell(s.doc, ""))
	}
	names := slices.Sorted(maps.Keys(goOnly))
	b.WriteString("\nGo only:")
	for i, name := range names {
		sep := ";"
		if i == len(names)-1 {
			sep = "."
		}
		fmt.Fprintf(&b, " `%s`, %s%s", name, goOnly[name], sep)
	}
	b.WriteString("\n")
	return b.String()
}

// fila help work shows every flag with its form, range, default and file key.
func TestHelpWorkShowsEverySetting(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	require.Zero(t, run([]string{"help", "work"}, &help, io.Discard))
	for _, s := range settings {
		if s.flag != "" && !slices.Contains(globalFlags, s.flag) {
			require.Contains(t, help.String(), "  -"+s.flag+" "+s.arg+"\n", s.flag)
			require.Contains(t, help.String(), "in a file: "+s.key+")", s.flag)
		}
	}
	require.Contains(t, help.String(), "(DURATION: 500ms to 1h; default 30s; in a file: lease)")
}
