package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/chaos"
	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/testdb"
)

// filaBin is the fila binary the process scenarios run.
var filaBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fila-chaos-test-")
	if err != nil {
		panic(err)
	}
	filaBin = filepath.Join(dir, "fila")
	out, err := exec.Command("go", "build", "-o", filaBin, "github.com/fila-run/fila/cmd/fila").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build fila: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		goleak.VerifyTestMain(leakCheck{m, &code},
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		)
	}()
	os.Exit(code)
}

// leakCheck lets TestMain remove the binary's directory after the tests
// and goleak's check, whatever they return.
type leakCheck struct {
	m    *testing.M
	code *int
}

func (l leakCheck) Run() int { *l.code = l.m.Run(); return *l.code }

// logger logs the workers' warnings and errors to the test.
func env(t *testing.T) *chaos.Env {
	return &chaos.Env{
		AdminDSN:  testdb.AdminURL(),
		PoolerDSN: os.Getenv("FILA_TEST_PGBOUNCER_URL"),
		FilaBin:   filaBin,
		Logger:    zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)),
		Progress:  func(line string) { t.Log(line) },
	}
}

// clusterEnv is an Env on a PostgreSQL of the test's own, which the test
// may restart without disturbing the rest of the suite. With bouncer (or
// when the suite runs through PgBouncer) a PgBouncer of its own stands in
// front of it.
func clusterEnv(t *testing.T, bouncer bool) *chaos.Env {
	t.Helper()
	e := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Logger: e.Logger})
	if errors.Is(err, pgcluster.ErrNotInstalled) {
		testdb.Missing(t, "cannot start a PostgreSQL of the test's own: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the test's PostgreSQL log:\n%s", c.LogTail())
		}
		require.NoError(t, c.Close())
	})
	e.Cluster, e.AdminDSN, e.PoolerDSN = c, c.DSN("postgres"), ""
	if bouncer || testdb.ThroughPgBouncer() {
		b, err := pgbouncer.Start(ctx, pgbouncer.Options{UpstreamPort: c.Port(), Logger: e.Logger})
		if errors.Is(err, pgbouncer.ErrNotInstalled) {
			testdb.Missing(t, "cannot start a PgBouncer of the test's own: %v", err)
		}
		require.NoError(t, err)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the test's PgBouncer log:\n%s", b.LogTail())
			}
			require.NoError(t, b.Close())
		})
		e.Bouncer = b
		if testdb.ThroughPgBouncer() {
			e.PoolerDSN = b.DSN("postgres")
		}
	}
	return e
}

// run runs the named scenario and requires every check to hold.
func run(t *testing.T, e *chaos.Env, name string, size chaos.Size) *chaos.Result {
	t.Helper()
	sc, ok := chaos.Lookup(name)
	require.True(t, ok, "no scenario %q", name)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := chaos.Run(ctx, e, sc, size)
	if chaos.ErrSkipped(err) {
		testdb.Missing(t, "%v", err)
	}
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, chaos.WriteTable(&b, []*chaos.Result{res}, false))
	t.Logf("\n%s", b.String())
	require.Empty(t, res.Failures)
	return res
}
