package testdb_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// leakEnv makes TestLeavesATransactionOpen, run in a process of its own by
// TestOpenTransactionDoesNotHangTheEnd, leave its transaction open.
const leakEnv = "FILA_TESTDB_LEAK"

// TestLeavesATransactionOpen does nothing unless run by
// TestOpenTransactionDoesNotHangTheEnd: then it ends with a transaction
// open, holding one of its pool's connections, as a test does when a
// require fails between Begin and Rollback.
func TestLeavesATransactionOpen(t *testing.T) {
	mode := os.Getenv(leakEnv)
	if mode == "" {
		return
	}
	db := testdb.New(t)
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), "SELECT 1")
	require.NoError(t, err)
	if mode == "fail" {
		t.Fatal("failing while the transaction is open")
	}
}

// A test that ends with a transaction open does not hang until the
// package's timeout: its end fails it (or, when it already failed, says
// why its database is dropped under an open session) after a bounded wait,
// and its database is dropped all the same.
func TestOpenTransactionDoesNotHangTheEnd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mode, want string }{
		{"pass", "still in use 30s after the test ended: a transaction left open?"},
		{"fail", "failing while the transaction is open"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLeavesATransactionOpen$", "-test.v", "-test.timeout=80s")
			cmd.Env = append(os.Environ(), leakEnv+"="+c.mode)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			require.Error(t, err, "the test that left its transaction open must fail:\n%s", out)
			require.NoError(t, ctx.Err(), "the test that left its transaction open hung:\n%s", out)
			require.Contains(t, string(out), c.want)
			require.NotContains(t, string(out), "drop database", "its database must be dropped:\n%s", out)
			require.Less(t, took, 60*time.Second, "%s", out)
			if c.mode == "fail" {
				require.Contains(t, string(out), "dropping the database ends their sessions")
			}
		})
	}
}
