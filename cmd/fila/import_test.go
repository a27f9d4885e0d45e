package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// The command's mistakes and help. Its runs against River's real schema
// are in bench/peers (TestImportRiverCommand), the module that depends on
// River.
func TestImportRiverUsage(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // never connected to

	out, errOut, code := fila(t, db, "help", "import", "river")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "usage: fila import river [flags]")
	for _, f := range []string{"-from", "-river-schema", "-batch-size", "-dry-run", "-include-running", "-include-finished", "-delete"} {
		require.Contains(t, out, f)
	}
	require.Contains(t, out, "Only once every River worker has stopped")

	out, _, code = fila(t, db, "help")
	require.Zero(t, code)
	require.Regexp(t, `(?m)^  import `, out)

	_, errOut, code = fila(t, db, "import")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "usage: fila import <source>")
	_, errOut, code = fila(t, db, "import", "sidekiq")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown source "sidekiq": fila imports from river`)
	_, errOut, code = fila(t, db, "import", "river", "--batch-size", "0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--batch-size 0 out of range: allowed 1 to 10000")
	_, errOut, code = fila(t, db, "import", "river", "--dry-run", "--delete")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give --dry-run or --delete, not both")
}

func TestImportRiverBadSource(t *testing.T) {
	t.Parallel()
	db := migrated(t)

	_, errOut, code := fila(t, db, "import", "river")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "fila import river: no river_job table in the connection's search_path of database "+db.Name)

	_, errOut, code = fila(t, db, "import", "river", "--river-schema", "app")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no river_job table in schema app")

	_, errOut, code = fila(t, db, "import", "river", "--from", "postgres://postgres@127.0.0.1:1/river?connect_timeout=2")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "fila import river: --from: cannot reach River's database at postgres@127.0.0.1:1/river")

	_, errOut, code = fila(t, db, "import", "river", "--from", "::not a dsn")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "fila import river: --from:")
}

func TestImportRiverNeedsFilasTables(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, errOut, code := fila(t, db, "import", "river")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "run `fila migrate` first")
}
