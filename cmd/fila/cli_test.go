package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // never connected to: help and version need no database

	out, errOut, code := fila(t, db, "help")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "usage: fila")
	for _, c := range []string{"migrate", "enqueue", "work", "jobs", "trigger", "help", "version"} {
		require.Regexp(t, `(?m)^  `+c+` `, out, "fila help lists %s", c)
	}

	out, errOut, code = fila(t, db, "help", "trigger")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "usage: fila trigger [on|off] [flags]")
	_, errOut, code = fila(t, db, "trigger", "-h")
	require.Zero(t, code)
	require.Contains(t, errOut, "usage: fila trigger [on|off] [flags]")

	out, _, code = fila(t, db, "help", "jobs")
	require.Zero(t, code)
	for _, c := range []string{"list", "show", "retry", "cancel", "delete"} {
		require.Regexp(t, `(?m)^  `+c+` `, out)
	}
	out, _, code = fila(t, db, "help", "jobs", "retry")
	require.Zero(t, code)
	require.Contains(t, out, "usage: fila jobs retry ID… | --state dead|cancelled")
	require.Contains(t, out, "-state")

	out, _, code = fila(t, db, "help", "enqueue")
	require.Zero(t, code)
	require.Contains(t, out, "a lower number runs first")
	out, _, code = fila(t, db, "help", "work")
	require.Zero(t, code)
	require.Contains(t, out, "its stdout goes to this worker's stdout")

	_, errOut, code = fila(t, db, "help", "frobnicate")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `unknown command "frobnicate"`)

	// Without a DSN, version reads no database.
	cmd := exec.Command(filaBin, "version")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"FILA_DSN", "DATABASE_URL", "PGHOST", "PGDATABASE"}, name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	b, err := cmd.Output()
	require.NoError(t, err)
	schema := fmt.Sprintf("schema version %d: the migrations this fila applies and needs\n", migrations.Latest())
	require.Regexp(t, `^fila (\(devel\)|v\d+\.\d+\.\d+\S*)\ncommit \S+.*\nbuilt with go\S+\n`+regexp.QuoteMeta(schema)+
		`database: not checked \(give --dsn or set FILA_DSN to compare its schema\)\n$`, string(b))
}

// fila version and fila --version name the binary's schema version and,
// given a DSN, the database's.
func TestVersionComparesTheDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, errOut, code := fila(t, db, args...)
		require.Zero(t, code, errOut)
		require.Contains(t, out, fmt.Sprintf("schema version %d: ", migrations.Latest()))
		require.Regexp(t, `(?m)^database schema version 0 at \S+: no Fila tables: run `+"`fila migrate`"+`$`, out, "%v", args)
	}
	_, errOut, code := fila(t, db, "migrate")
	require.Zero(t, code, errOut)
	out, errOut, code := fila(t, db, "--version")
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprintf("database schema version %d at ", migrations.Latest()))
	require.True(t, strings.HasSuffix(out, ": up to date\n"), out)
	_, err := db.Pool.Exec(context.Background(), "DELETE FROM fila_migrations WHERE version = $1::int", migrations.Latest())
	require.NoError(t, err)
	out, _, _ = fila(t, db, "version")
	require.Contains(t, out, fmt.Sprintf("database schema version %d at ", previousVersions(t)[0]))
	require.True(t, strings.HasSuffix(out, ": older than this fila's: run `fila migrate`\n"), out)

	_, errOut, code = fila(t, db, "--dsn", "postgres://postgres@127.0.0.1:1/nowhere", "version")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "fila version: cannot reach the database at postgres@127.0.0.1:1/nowhere")
}

func TestVersionLines(t *testing.T) {
	t.Parallel()
	bi := func(v string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/fila-run/fila", Version: v}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want []string
	}{
		{bi("v1.2.3"), []string{"fila v1.2.3", "commit unknown: built without version control information", "built with go1.26.8"}},
		{bi("v0.0.0-20261204103000-52f408d1a2b3"), []string{"fila v0.0.0-20261204103000-52f408d1a2b3", "commit 52f408d1a2b3", "built with go1.26.8"}},
		{bi("v1.2.4-0.20261204103000-52f408d1a2b3+dirty"), []string{"fila v1.2.4-0.20261204103000-52f408d1a2b3+dirty", "commit 52f408d1a2b3", "built with go1.26.8"}},
		{bi("(devel)", "vcs.revision", "52f408d1a2b3c4d5e6f7", "vcs.modified", "true"),
			[]string{"fila (devel)", "commit 52f408d1a2b3, with changes not committed", "built with go1.26.8"}},
		{bi(""), []string{"fila (devel)", "commit unknown: built without version control information", "built with go1.26.8"}},
		{nil, []string{"fila (devel)", "commit unknown: the binary carries no build information"}},
	} {
		require.Equal(t, c.want, versionLines(c.bi))
	}
}

// TestPayloadFromStdinAndFile enqueues a payload longer than the kernel
// lets one command-line argument be (128 KiB), from stdin and from a file.
func TestPayloadFromStdinAndFile(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	big := fmt.Sprintf(`{"blob": %q}`, strings.Repeat("x", 140*1024))
	require.Greater(t, len(big), 140*1024)
	file := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(file, []byte(big+"\n"), 0o600))

	stored := func(id string) bool {
		var same bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT payload = $2::jsonb FROM fila_jobs WHERE id = $1::bigint", id, big).Scan(&same))
		return same
	}
	out, errOut, code := filaStdin(t, db, big, "enqueue", "--kind", "noop", "--payload", "-")
	require.Zero(t, code, errOut)
	require.True(t, stored(strings.TrimSpace(out)), "payload from stdin stored whole")
	out, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--payload", "@"+file)
	require.Zero(t, code, errOut)
	require.True(t, stored(strings.TrimSpace(out)), "payload from a file stored whole")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"a": `), 0o600))
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"--payload", "-"}, "--payload - (stdin) is empty"},
		{"{nope", []string{"--payload", "-"}, "--payload - (stdin) is not valid JSON"},
		{"", []string{"--payload", "@" + bad}, "--payload @" + bad + " is not valid JSON"},
		{"", []string{"--payload", "@/no/such/file.json"}, "no such file or directory"},
	} {
		out, errOut, code := filaStdin(t, db, c.stdin, append([]string{"enqueue", "--kind", "noop"}, c.args...)...)
		require.Equal(t, 1, code, "%v", c.args)
		require.Empty(t, out)
		require.Contains(t, errOut, c.want)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %s", errOut)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Equal(t, 2, n)

	// JSON null is a payload like any other (runtime.Job.Decode's comment
	// says so, and what a handler decoding it into a struct gets).
	out, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--payload", "null")
	require.Zero(t, code, errOut)
	var payload string
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT payload::text FROM fila_jobs WHERE id = $1::bigint", strings.TrimSpace(out)).Scan(&payload))
	require.Equal(t, "null", payload)
}

func TestCommandsOnAnUnmigratedDatabaseSayToMigrate(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, args := range [][]string{
		{"trigger"},
		{"trigger", "off"},
		{"enqueue", "--kind", "noop"},
		{"enqueue", "--kind", "anything", "--allow-unknown-kind"},
		{"jobs", "list"},
		{"jobs", "retry", "1"},
	} {
		out, errOut, code := fila(t, db, args...)
		require.Equal(t, 1, code, "%v", args)
		require.Empty(t, out)
		require.Equal(t, fmt.Sprintf("fila %s: the database has no Fila tables: run `fila migrate` first\n", commandName(args)), errOut)
	}
}

// commandName is how a command names itself in its errors.
func commandName(args []string) string {
	if args[0] == "jobs" {
		return "jobs " + args[1]
	}
	return args[0]
}

func TestMigrateSaysWhatItDid(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	out, errOut, code := fila(t, db, "migrate")
	require.Zero(t, code, errOut)
	require.Regexp(t, fmt.Sprintf(`^applied migrations? 1(, \d+)*; now at version %d\n$`, migrations.Latest()), out)
	out, errOut, code = fila(t, db, "migrate")
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("already at version %d; nothing to do\n", migrations.Latest()), out)
}

// TestMigrateToAVersion: --to goes up to a version, or rolls back to it;
// jobs outlive every rollback but the one to 0, which must be confirmed.
func TestMigrateToAVersion(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	latest := migrations.Latest()
	out, errOut, code := fila(t, db, "migrate", "--to", "2")
	require.Zero(t, code, errOut)
	require.Equal(t, "applied migrations 1, 2; now at version 2\n", out)
	out, errOut, code = fila(t, db, "migrate")
	require.Zero(t, code, errOut)
	require.Regexp(t, fmt.Sprintf(`^applied migrations 3(, \d+)*; now at version %d\n$`, latest), out)

	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `INSERT INTO fila_jobs (kind) VALUES ('kept') RETURNING id`).Scan(&id))
	// A worker that runs would lose the functions it calls: refused
	// unless confirmed.
	// One that missed three refreshes of its row is gone, and does not
	// count.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source)
		VALUES ('host/1/w', 'host', 1, '{default}', '{kept}', 'notify', 'up');
		INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval, last_seen_at)
		VALUES ('host/2/gone', 'host', 2, '{default}', '{kept}', 'notify', 'up', interval '1 second', now() - interval '4 seconds')`)
	require.NoError(t, err)
	// The two versions below the latest (numbers may be skipped).
	prev := previousVersions(t)
	_, errOut, code = fila(t, db, "migrate", "--to", strconv.Itoa(prev[1]))
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `worker host/1/w is live \(its row was refreshed [\d.]+m?s ago\): stop it before rolling back, or add --yes if it is gone`, errOut)
	v, err := migrations.Version(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, latest, v, "a refused rollback changes nothing")
	out, errOut, code = fila(t, db, "migrate", "--to", strconv.Itoa(prev[1]), "--yes")
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("rolled back migrations %d, %d; now at version %d\n", latest, prev[0], prev[1]), out)
	v, err = migrations.Version(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, prev[1], v)
	var kind string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT kind FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&kind))
	require.Equal(t, "kept", kind)

	for _, bad := range []struct{ args []string }{
		{[]string{"migrate", "--to", "-1"}},
		{[]string{"migrate", "--to", strconv.Itoa(latest + 1)}},
	} {
		_, errOut, code = fila(t, db, bad.args...)
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, fmt.Sprintf("out of range: this fila has versions 0 (no tables) to %d", latest))
	}
	_, errOut, code = fila(t, db, "migrate", "--to", "0")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "--to 0 drops fila_jobs and every job in it: add --yes to do it")
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT kind FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&kind),
		"a refused rollback loses nothing")

	out, errOut, code = fila(t, db, "migrate", "--to", "0", "--yes")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "now at version 0\n")
	v, err = migrations.Version(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Zero(t, v)
}

// TestFlagValuesMeanWhatTheySay: on the command line zero is never a
// stand-in for a default, and nothing is adjusted quietly: a value out of
// range is refused with the flag's name and the range.
func TestFlagValuesMeanWhatTheySay(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"work", "--concurrency", "0"}, "--concurrency: 0 is out of range: allowed 1 to 10000"},
		{[]string{"work", "--concurrency", "-1"}, "--concurrency: -1 is negative: allowed 1 to 10000"},
		{[]string{"work", "--lease", "0"}, "--lease: 0 is out of range: allowed 500ms to 1h"},
		{[]string{"work", "--safety-poll", "0"}, "--safety-poll: 0 is out of range: allowed 1s to 10m"},
		{[]string{"work", "--poll-min", "0"}, "--poll-min: 0 is out of range: allowed 1ms to 1m"},
		{[]string{"work", "--poll-min", "5s", "--poll-max", "1s"}, "--poll-max: 1s is out of range: allowed 5s to 10m (from --poll-min)"},
		{[]string{"work", "--shutdown-timeout", "-1s"}, "--shutdown-timeout: -1s is negative"},
		{[]string{"work", "--retention", "0"}, "--retention: want a duration above 0 such as 72h, or keep"},
		{[]string{"work", "--queue", ""}, `--queue "": queue name is empty`},
		{[]string{"work", "--queue", "a", "--queue", "a"}, "--queue a: queue a is listed twice"},
		{[]string{"enqueue", "--kind", "noop", "--queue", ""}, "--queue: queue name is empty"},
		{[]string{"enqueue", "--kind", "noop", "--max-attempts", "0"}, "--max-attempts 0 out of range: allowed 1 to 1000"},
		{[]string{"enqueue", "--kind", "noop", "--priority", "40000"}, "--priority 40000 out of range"},
		{[]string{"jobs", "list", "--limit", "0"}, "--limit 0 out of range"},
		{[]string{"work", "--lease", "5"}, `--lease: "5" is not a duration: write a number and its unit, such as 500ms, 30s or 2m`},
		{[]string{"stats", "--check", "--max-oldest", "5"}, `"5" is not a duration: write a number and its unit`},
		{[]string{"bench", "--duration", "5"}, `"5" is not a duration: write a number and its unit`},
		{[]string{"stats", "--check", "--max-oldest", "-5s"}, `--max-oldest -5s is negative`},
		{[]string{"work", "--log-level", "loud"}, `--log-level "loud" is unknown`},
		{[]string{"jobs", "list", "--log-format", "xml"}, `--log-format "xml" is unknown`},
	}
	for _, c := range cases {
		out, errOut, code := fila(t, db, c.args...)
		require.NotZero(t, code, "%v should fail", c.args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
		require.NotContains(t, errOut, "fila config", "%v", c.args)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n, "nothing is enqueued by a refused command")
}

func TestErrorsAreNotPrefixedTwice(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, errOut, code := fila(t, db, "--dsn", "postgres://postgres@127.0.0.1:1/nowhere", "work", "--log-level", "error")
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "fila work: cannot reach the database"), last)
}

func TestKindNamesAreChecked(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--kind", "   ", "--allow-unknown-kind"}, "starts or ends with a blank"},
		{[]string{"enqueue", "--kind", "a\tb", "--allow-unknown-kind"}, "holds a control character"},
		{[]string{"enqueue", "--kind", "line\nbreak", "--allow-unknown-kind"}, "holds a control character"},
		{[]string{"enqueue", "--kind", " padded", "--allow-unknown-kind"}, "starts or ends with a blank"},
		{[]string{"enqueue", "--kind", strings.Repeat("k", 201), "--allow-unknown-kind"}, "at most 200"},
		{[]string{"work", "--exec", "a\tb=true"}, "holds a control character"},
		{[]string{"work", "--exec", " =true"}, "starts or ends with a blank"},
		{[]string{"work", "--exec", "ok=true", "--exec", "ok=false"}, "--exec ok=false: kind ok is given twice"},
		{[]string{"work", "--exec", "noop=true"}, "noop is a built-in kind"},
		{[]string{"work", "--exec", "ok=true", "--timeout", "ok=1s", "--timeout", "ok=2s"}, "--timeout ok=2s: kind ok is given twice"},
	}
	for _, c := range cases {
		out, errOut, code := fila(t, db, c.args...)
		require.Equal(t, 1, code, "%q should fail", c.args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%q: one line: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%q", c.args)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n)
}

// TestConsoleLogsAreColouredOnlyOnATerminal: --log-format console into a
// pipe writes plain text.
func TestConsoleLogsAreColouredOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, errOut, code := fila(t, db, "--log-format", "console", "migrate")
	require.Zero(t, code, errOut)
	require.Contains(t, errOut, "INFO")
	require.NotContains(t, errOut, "\x1b[", "escape codes in a pipe")
	_, errOut, code = fila(t, db, "migrate")
	require.Zero(t, code)
	require.True(t, strings.HasPrefix(errOut, "{"), "auto is JSON off a terminal: %s", errOut)
}

func TestEnqueueAcceptsBuiltinKindsOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	for _, args := range [][]string{
		{"enqueue", "--kind", "noop"},
		{"enqueue", "--kind", "sleep", "--payload", `{"ms": 10}`},
		{"enqueue", "--kind", "noop", "--queue", "elsewhere"},
	} {
		out, errOut, code := fila(t, db, args...)
		require.Zero(t, code, "%v: %s", args, errOut)
		require.Regexp(t, `^\d+\n$`, out)
	}
}

// TestEnqueueChecksTheKindOnItsQueue: a kind is known on the queues whose
// workers handle it, not on others; and an --exec command's stdout is the
// worker's stdout.
func TestEnqueueChecksTheKindOnItsQueue(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	w := startWorkerOutput(t, db, "--queue", "mail", "--exec", `send=echo "sent $FILA_JOB_ID"`)
	waitFor(t, 60*time.Second, "worker registered its kinds", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_kinds WHERE kind = 'send'").Scan(&n)
		return n == 1
	})
	out, errOut, code := fila(t, db, "enqueue", "--kind", "send", "--queue", "mail")
	require.Zero(t, code, errOut)
	id := strings.TrimSpace(out)
	waitFor(t, 30*time.Second, "the command's output on the worker's stdout", func() bool {
		return strings.Contains(w.stdout.String(), "sent "+id+"\n")
	})
	require.NotContains(t, w.stderr.String(), "sent "+id)

	out, errOut, code = fila(t, db, "enqueue", "--kind", "send")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `no worker handles kind "send" on queue "default"`)
	out, errOut, code = fila(t, db, "enqueue", "--kind", "sned", "--queue", "mail")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Regexp(t, regexp.MustCompile(`no worker handles kind "sned" on queue "mail"; workers of mail handle: .*\bsend\b`), errOut)
}

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	g := &globals{name: "jobs retry", stderr: &stderr}
	for _, c := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"1", "2"}, []string{"1", "2"}, false},
		{[]string{"--json", "1", "2"}, []string{"1", "2"}, true},
		{[]string{"1", "--json", "2"}, []string{"1", "2"}, true},
		{[]string{"1", "2", "--json"}, []string{"1", "2"}, true},
		{[]string{"1", "--", "--json"}, []string{"1", "--json"}, false},
	} {
		fs := newTestFlagSet()
		asJSON := fs.Bool("json", false, "")
		pos, err := g.parseArgs(fs, c.args)
		require.NoError(t, err, "%q", c.args)
		require.Equal(t, c.pos, pos, "%q", c.args)
		require.Equal(t, c.json, *asJSON, "%q", c.args)
	}
	_, err := g.parseArgs(newTestFlagSet(), []string{"1", "--nope"})
	require.ErrorIs(t, err, errUsage)
	require.Equal(t, "fila jobs retry: flag provided but not defined: -nope (run fila help jobs retry)\n", stderr.String())
}

func newTestFlagSet() *flag.FlagSet { return flag.NewFlagSet("jobs retry", flag.ContinueOnError) }

// Durations in logs carry their unit, as a duration string ("30s"), in
// JSON and on the console alike, rather than a bare number of seconds.
func TestLogsGiveDurationsWithTheirUnit(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	w := startWorkerOutput(t, db, "--lease", "45s")
	var started map[string]any
	waitFor(t, 30*time.Second, "the runtime started", func() bool {
		for _, e := range logEntries(w) {
			if e["msg"] == "runtime started" {
				started = e
				return true
			}
		}
		return false
	})
	require.Equal(t, "45s", started["lease"])

	console := filaCmd(db, "work", "--log-format", "console", "--lease", "1m30s")
	var out lockedBuffer
	console.Stdout, console.Stderr = &out, &out
	require.NoError(t, console.Start())
	t.Cleanup(func() { _ = console.Process.Kill(); _ = console.Wait() })
	waitFor(t, 30*time.Second, "the runtime started", func() bool { return strings.Contains(out.String(), "runtime started") })
	require.Contains(t, out.String(), `"lease": "1m30s"`)
}

// previousVersions are the migration versions below the latest, the
// highest first: numbers may be skipped (kept for a migration of another
// branch), so the one below the latest is not always latest-1.
func previousVersions(t *testing.T) []int {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	var out []int
	for i := len(all) - 2; i >= 0; i-- {
		out = append(out, all[i].Version)
	}
	return out
}
