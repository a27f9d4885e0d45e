package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/readme"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/migrations"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// exampleTimeout bounds one example, its set-up and checks included.
const exampleTimeout = 3 * time.Minute

// TestREADMEExamples runs every example of the README and of the guides
// (readme.Documents: README.md and every docs/**/*.md, found by name so that
// no new guide is left out) that its marker says runs, each against a
// throwaway database of its own, as a reader would run it:
//
//   - sh: the block, by bash -e, with the fila under test first on PATH and
//     FILA_DSN and FILA_LISTEN_DSN set; what it starts in the background is
//     stopped with SIGTERM once the block and its checks are done;
//   - console: each "$ " line by bash, its output compared with the lines
//     shown under it, if any;
//   - sql: the block by the simple protocol, several statements at once as
//     psql sends them;
//   - go: a program (package main) built and run; a fragment compiled as
//     the body of a function given ctx, pool (a *pgxpool.Pool on FILA_DSN),
//     dsn and kinds (a []runtime.Kind), and run, its variables counting as
//     used by the rest of that function; one that opens a database/sql
//     driver by name (sql.Open("pgx", dsn)) gets the driver imported;
//   - yaml: a configuration file, checked by fila work --config --check with
//     only FILA_DSN set.
//
// Addresses an example listens on (127.0.0.1:PORT, but PostgreSQL's and
// PgBouncer's) are moved to free ports, so the suite can run beside a real
// Fila. A block the marker says does not run must say why; a block without a
// marker fails the test.
func TestREADMEExamples(t *testing.T) {
	t.Parallel()
	docs, err := readme.Documents(repoRoot)
	require.NoError(t, err)
	require.Contains(t, docs, "docs/bench.md")
	for _, doc := range docs {
		text, err := os.ReadFile(filepath.Join(repoRoot, doc))
		require.NoError(t, err)
		examples, err := readme.Parse(string(text))
		require.NoError(t, err, "%s: every code block says how it is checked", doc)
		for _, ex := range examples {
			if !ex.Run {
				continue
			}
			t.Run(fmt.Sprintf("%s:%d", doc, ex.Line), func(t *testing.T) {
				t.Parallel()
				runExample(t, ex)
			})
		}
	}
}

// exampleState is a state an example starts from ("given …"), and what
// must hold once it ran.
type exampleState struct {
	empty   bool // a database without Fila's tables
	prepare string
	check   func(t *testing.T, db *testdb.DB)
}

// deadCharges are three dead charge jobs and one scheduled for later.
const deadCharges = `INSERT INTO fila_jobs (id, kind, payload, state, attempts, max_attempts, last_error, started_at, finished_at, run_at)
OVERRIDING SYSTEM VALUE VALUES
	(4211, 'charge', '{"account": 7, "cents": 1200}', 'dead', 5, 5, 'card declined', now() - interval '2 minutes', now() - interval '2 minutes', now() - interval '1 hour'),
	(4212, 'charge', '{"account": 8, "cents": 900}', 'dead', 5, 5, 'card declined', now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 hour'),
	(4213, 'charge', '{"account": 9, "cents": 300}', 'dead', 5, 5, 'gateway timeout', now() - interval '30 seconds', now() - interval '30 seconds', now() - interval '1 hour');
INSERT INTO fila_jobs (id, kind, payload, run_at) OVERRIDING SYSTEM VALUE
VALUES (4300, 'charge', '{"account": 10, "cents": 500}', now() + interval '1 hour')`

var exampleStates = map[string]exampleState{
	"": {},
	"an empty database": {
		empty: true,
		check: func(t *testing.T, db *testdb.DB) {
			waitFor(t, time.Minute, "the job enqueued by hand completed", func() bool {
				var n int
				_ = db.Pool.QueryRow(context.Background(),
					"SELECT count(*) FROM fila_jobs WHERE kind = 'greet' AND state = 'completed'").Scan(&n)
				return n == 1
			})
		},
	},
	"dead charge jobs": {prepare: deadCharges},
	"a pending sync job for account 7": {
		prepare: `INSERT INTO fila_jobs (id, kind, payload, unique_key) OVERRIDING SYSTEM VALUE
VALUES (500, 'sync', '{"account": 7}', 'sync:account:7')`,
		check: func(t *testing.T, db *testdb.DB) {
			var ids []int64
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				"SELECT array_agg(id) FROM fila_jobs WHERE kind = 'sync' AND unique_key = 'sync:account:7'").Scan(&ids))
			require.Equal(t, []int64{500}, ids, "the duplicate inserted nothing")
		},
	},
	"dead job 42 and pending job 43": {
		prepare: `INSERT INTO fila_jobs (id, kind, state, attempts, max_attempts, last_error, finished_at) OVERRIDING SYSTEM VALUE
VALUES (42, 'charge', 'dead', 5, 5, 'card declined', now() - interval '1 minute');
INSERT INTO fila_jobs (id, kind) OVERRIDING SYSTEM VALUE VALUES (43, 'charge')`,
		check: func(t *testing.T, db *testdb.DB) {
			rows, err := db.Pool.Query(context.Background(), "SELECT id, state, attempts FROM fila_jobs ORDER BY id")
			require.NoError(t, err)
			type row struct {
				ID       int64
				State    string
				Attempts int
			}
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
			require.NoError(t, err)
			require.Equal(t, []row{{42, "pending", 0}, {43, "cancelled", 0}}, got)
		},
	},
}

func runExample(t *testing.T, ex readme.Example) {
	state, ok := exampleStates[ex.Given]
	require.True(t, ok, "no state %q for the example's given (exampleStates)", ex.Given)
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
	defer cancel()
	if !state.empty {
		_, err := migrations.Migrate(ctx, db.Pool)
		require.NoError(t, err)
	}
	if state.prepare != "" {
		execSimple(t, ctx, db, state.prepare)
	}
	if ex.ExcerptOf != "" {
		requireExcerpt(t, ex.Code, ex.ExcerptOf)
		if strings.HasSuffix(ex.ExcerptOf, "_test.go") {
			return // a test of the suite: go test runs it where it is
		}
	}
	code := freePorts(t, ex.Code)
	dir := t.TempDir()
	if ex.InRepository {
		abs, err := filepath.Abs(repoRoot)
		require.NoError(t, err)
		dir = abs
	}
	env := exampleEnv(t, db)
	var stop func()
	switch ex.Lang {
	case "sh":
		stop = runShell(t, ctx, ex, code, dir, env)
	case "console":
		runConsole(t, ctx, ex, code, dir, env)
	case "sql":
		require.Zero(t, ex.Exits, "an exit status for SQL")
		execSimple(t, ctx, db, code)
	case "go":
		runGo(t, ctx, ex, code, env)
	case "yaml":
		runConfig(t, ctx, code, env)
	default:
		t.Fatalf("no runner for a %q block: mark it <!-- example: not run: REASON -->", ex.Lang)
	}
	if state.check != nil {
		state.check(t, db)
	}
	if stop != nil {
		stop()
	}
}

// exampleEnv is the environment of an example: the fila under test first on
// PATH (after GOBIN, where an example may install one), the database in
// FILA_DSN and FILA_LISTEN_DSN.
func exampleEnv(t *testing.T, db *testdb.DB) []string {
	gobin := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "GOBIN", "FILA_DSN", "FILA_LISTEN_DSN", "DATABASE_URL", "FILA_UI_ADMIN_TOKEN", "FILA_UI_READ_TOKEN":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"PATH="+gobin+string(os.PathListSeparator)+filepath.Dir(filaBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOBIN="+gobin, "FILA_DSN="+db.DSN, "FILA_LISTEN_DSN="+db.DirectDSN)
}

// freePorts moves every 127.0.0.1:PORT of code, but PostgreSQL's and
// PgBouncer's, to a port free now, the same port for the same address.
func freePorts(t *testing.T, code string) string {
	moved := map[string]string{}
	return regexp.MustCompile(`127\.0\.0\.1:(\d+)`).ReplaceAllStringFunc(code, func(addr string) string {
		if strings.HasSuffix(addr, ":5432") || strings.HasSuffix(addr, ":6432") {
			return addr
		}
		if moved[addr] == "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			moved[addr] = ln.Addr().String()
			require.NoError(t, ln.Close())
		}
		return moved[addr]
	})
}

// execSimple runs statements as psql sends them: several at once, by the
// simple protocol.
func execSimple(t *testing.T, ctx context.Context, db *testdb.DB, sql string) {
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Conn().PgConn().Exec(ctx, sql).ReadAll()
	require.NoError(t, err, "%s", sql)
}

// requireExcerpt checks that every line of code is a line of file, in the
// same order; comments (from " #" on) and blank lines aside, which either
// may have of its own.
func requireExcerpt(t *testing.T, code, file string) {
	whole, err := os.ReadFile(filepath.Join(repoRoot, file))
	require.NoError(t, err)
	uncommented := func(l string) string {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			return ""
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		return strings.TrimRight(l, " ")
	}
	lines := strings.Split(string(whole), "\n")
	for i, l := range lines {
		lines[i] = uncommented(l)
	}
	at := 0
	for _, want := range strings.Split(strings.TrimSuffix(code, "\n"), "\n") {
		if want = uncommented(want); want == "" {
			continue
		}
		i := slices.Index(lines[at:], want)
		require.GreaterOrEqual(t, i, 0, "%q is not in %s after line %d", want, file, at)
		at += i + 1
	}
}

// runShell runs a sh block with bash -e in a process group of its own, and
// returns what stops the processes it left running (a worker started with
// &): SIGTERM, as an operator would, then SIGKILL after 30 s.
func runShell(t *testing.T, ctx context.Context, ex readme.Example, code, dir string, env []string) func() {
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", code)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: what the block leaves running keeps its output
	// open, and Wait must return when the block ends.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "output"))
	require.NoError(t, err)
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	out := fileText{outFile.Name()}
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	stop := func() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		if !testwait.For(30*time.Second, func() bool { return syscall.Kill(-pgid, 0) != nil }) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			t.Errorf("processes of the example still running 30 s after SIGTERM:\n%s", out.String())
		}
	}
	t.Cleanup(func() {
		if syscall.Kill(-pgid, 0) == nil {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("output of the example:\n%s", out.String())
		}
	})
	require.Equal(t, ex.Exits, exitCode(t, cmd.Wait()), "exit status of the block:\n%s", out.String())
	return stop
}

// fileText reads a file's text whenever asked.
type fileText struct{ path string }

func (f fileText) String() string {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// runConsole runs each "$ " line of a console block in turn; the lines
// under one, if any, are what it must print. Every command exits 0 but the
// last, which exits as the marker says.
func runConsole(t *testing.T, ctx context.Context, ex readme.Example, code, dir string, env []string) {
	type step struct {
		command string
		want    []string
	}
	var steps []step
	for _, line := range strings.Split(strings.TrimSuffix(code, "\n"), "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{command: c})
			continue
		}
		require.NotEmpty(t, steps, "output before the first command: %q", line)
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
	}
	for i, s := range steps {
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", s.command)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		want := 0
		if i == len(steps)-1 {
			want = ex.Exits
		}
		require.Equal(t, want, exitCode(t, cmd.Run()), "$ %s\nstdout:\n%s\nstderr:\n%s", s.command, stdout.String(), stderr.String())
		if len(s.want) > 0 {
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
				got = append(got, strings.TrimRight(l, " "))
			}
			require.Equal(t, s.want, got, "what $ %s prints", s.command)
		}
	}
}

// runConfig checks a configuration file as its reader would before
// deploying it, with only FILA_DSN set.
func runConfig(t *testing.T, ctx context.Context, code string, env []string) {
	path := filepath.Join(t.TempDir(), "fila.yaml")
	require.NoError(t, os.WriteFile(path, []byte(code), 0o600))
	cmd := exec.CommandContext(ctx, filaBin, "work", "--config", path, "--check")
	cmd.Env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "FILA_LISTEN_DSN=") })
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// goPackages are the packages a Go fragment may use without importing
// them, by the name it uses them by.
var goPackages = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "http": "net/http", "json": "encoding/json",
	"log": "log", "os": "os", "sql": "database/sql", "time": "time", "slog": "log/slog",
	"pgx":        "github.com/jackc/pgx/v5",
	"pgxpool":    "github.com/jackc/pgx/v5/pgxpool",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"runtime":    "github.com/fila-run/fila/runtime",
	"metrics":    "github.com/fila-run/fila/runtime/metrics",
	"slogfila":   "github.com/fila-run/fila/runtime/slogfila",
	"migrations": "github.com/fila-run/fila/migrations",
}

// sqlDriverPackages are the database/sql drivers a Go fragment may open by
// name, imported for their registration alone.
var sqlDriverPackages = map[string]string{"pgx": "github.com/jackc/pgx/v5/stdlib"}

// runGo builds a Go example in a module of its own that uses this
// repository, and runs it.
func runGo(t *testing.T, ctx context.Context, ex readme.Example, code string, env []string) {
	src := code
	if !strings.HasPrefix(strings.TrimSpace(code), "package ") {
		src = goFragment(t, code)
	}
	dir := goModule(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600))
	bin := filepath.Join(dir, "example")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(slices.Clone(env), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build of the example:\n%s\n%s", out, numbered(src))

	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env
	var output lockedBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1) // the exit, for whoever waits on it first
	done := make(chan struct{})   // closed at the exit
	go func() { exited <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	if ex.Until != "" {
		deadline := time.After(2 * time.Minute)
		for !strings.Contains(output.String(), ex.Until) {
			select {
			case err := <-exited:
				t.Fatalf("the example exited (%v) before printing %q:\n%s", err, ex.Until, output.String())
			case <-deadline:
				t.Fatalf("the example did not print %q within 2 minutes:\n%s", ex.Until, output.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
	}
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the example did not exit within 2 minutes:\n%s", output.String())
	}
	require.Equal(t, ex.Exits, exitCode(t, err), "the example's exit status:\n%s", output.String())
}

// goFragment makes a program of a Go fragment: its body runs in a function
// given ctx, pool, dsn and kinds; the variables it declares are used after it, as
// the rest of a reader's function would use them; the packages it names are
// imported.
func goFragment(t *testing.T, code string) string {
	imports := []string{"context", "log", "os", "time", "github.com/jackc/pgx/v5/pgxpool", "github.com/fila-run/fila/runtime"}
	for name, path := range goPackages {
		if regexp.MustCompile(`\b`+name+`\.`).MatchString(code) && !slices.Contains(imports, path) {
			imports = append(imports, path)
		}
	}
	slices.Sort(imports)
	var drivers []string
	for name, path := range sqlDriverPackages {
		if strings.Contains(code, `sql.Open("`+name+`"`) {
			drivers = append(drivers, path)
		}
	}
	slices.Sort(drivers)
	program := func(uses string) string {
		var b strings.Builder
		b.WriteString("package main\n\nimport (\n")
		for _, p := range imports {
			fmt.Fprintf(&b, "\t%q\n", p)
		}
		for _, p := range drivers {
			fmt.Fprintf(&b, "\t_ %q\n", p)
		}
		b.WriteString(`)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := os.Getenv("FILA_DSN")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	kinds := []runtime.Kind{{Name: "send-welcome", Handler: func(context.Context, *runtime.Job) error { return nil }}}
	if err := example(ctx, pool, dsn, kinds); err != nil {
		log.Fatal(err)
	}
}

func example(ctx context.Context, pool *pgxpool.Pool, dsn string, kinds []runtime.Kind) error {
`)
		b.WriteString(code)
		b.WriteString(uses)
		b.WriteString("\treturn nil\n}\n")
		return b.String()
	}
	src := program("")
	f, err := parser.ParseFile(gotoken.NewFileSet(), "main.go", src, 0)
	require.NoError(t, err, "the fragment does not parse:\n%s", numbered(src))
	var uses strings.Builder
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "example" {
			continue
		}
		for _, st := range fn.Body.List {
			var names []*ast.Ident
			switch s := st.(type) {
			case *ast.AssignStmt:
				if s.Tok == gotoken.DEFINE {
					for _, e := range s.Lhs {
						if id, ok := e.(*ast.Ident); ok {
							names = append(names, id)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == gotoken.VAR {
					for _, spec := range g.Specs {
						names = append(names, spec.(*ast.ValueSpec).Names...)
					}
				}
			}
			for _, id := range names {
				if id.Name != "_" && id.Name != "err" {
					fmt.Fprintf(&uses, "\t_ = %s\n", id.Name)
				}
			}
		}
	}
	return program(uses.String())
}

// goModule is a directory holding a module that requires this repository's
// module from its directory, with its go.sum, so an example builds from the
// module cache alone.
func goModule(t *testing.T) string {
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	modText := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(mod), "module example")
	modText += fmt.Sprintf("\nrequire github.com/fila-run/fila v0.0.0\n\nreplace github.com/fila-run/fila => %s\n", root)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(modText), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600))
	return dir
}

// numbered is source with line numbers, for a build error's message.
func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

// exitCode is a finished command's exit status; it fails the test if the
// command could not run.
func exitCode(t *testing.T, err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return -1
}
