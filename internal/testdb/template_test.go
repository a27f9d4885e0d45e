package testdb_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// templateNames lists the template databases whose names start with prefix.
func templateNames(t *testing.T, prefix string) []string {
	t.Helper()
	db := testdb.New(t)
	rows, err := db.Pool.Query(context.Background(), "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname", prefix)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	return names
}

// A template is built once for any number of copies, each copy holds what
// it built and is a database of its own, and DropTemplates leaves nothing.
func TestCopiesOfATemplate(t *testing.T) {
	var builds atomic.Int32
	build := func(ctx context.Context, pool *pgxpool.Pool) error {
		builds.Add(1)
		_, err := pool.Exec(ctx, "CREATE TABLE built (v int); INSERT INTO built VALUES (7)")
		return err
	}
	a := testdb.NewFrom(t, "copies", build)
	b := testdb.NewFrom(t, "copies", build)
	require.Equal(t, int32(1), builds.Load(), "one build for both copies")
	require.NotEqual(t, a.Name, b.Name)
	ctx := context.Background()
	_, err := a.Pool.Exec(ctx, "UPDATE built SET v = 8")
	require.NoError(t, err)
	var v int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT v FROM built").Scan(&v))
	require.Equal(t, 7, v, "a copy does not see another's writes")

	mine := fmt.Sprintf("fila_tpl_%d_copies", os.Getpid())
	require.Equal(t, []string{mine}, templateNames(t, mine))
	require.NoError(t, testdb.DropTemplates())
	require.Empty(t, templateNames(t, mine), "DropTemplates dropped it")
}

// staleEnv makes TestBuildsATemplate, run in a process of its own by
// TestTemplatesOfGoneProcessesAreSwept, build one.
const staleEnv = "FILA_TESTDB_TEMPLATE"

func TestBuildsATemplate(t *testing.T) {
	if os.Getenv(staleEnv) == "" {
		return
	}
	testdb.NewFrom(t, "swept", func(context.Context, *pgxpool.Pool) error { return nil })
	require.NoError(t, testdb.DropTemplates())
}

// The template of a test process that died without dropping it is dropped
// by the next process that builds one; a live process's is kept.
func TestTemplatesOfGoneProcessesAreSwept(t *testing.T) {
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	stale := "fila_tpl_" + strconv.Itoa(gone.Process.Pid) + "_swept"
	live := "fila_tpl_" + strconv.Itoa(os.Getpid()) + "_live"
	db := testdb.New(t)
	ctx := context.Background()
	for _, name := range []string{stale, live} {
		_, err := db.Pool.Exec(ctx, "CREATE DATABASE "+name)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = db.Pool.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, os.Args[0], "-test.run=^TestBuildsATemplate$", "-test.v")
	cmd.Env = append(os.Environ(), staleEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, templateNames(t, stale), "the gone process's template is dropped")
	require.Equal(t, []string{live}, templateNames(t, live), "a live process's template is kept")
	require.Empty(t, templateNames(t, "fila_tpl_"+strconv.Itoa(cmd.Process.Pid)+"_"), "the child dropped its own")
}
