package filatest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

// The helpers that take a runtime.DB read a database/sql transaction
// through runtime.SQL: a test of code on database/sql asserts its jobs the
// same way.
func TestRequireInsertedThroughDatabaseSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filatest.NewDB(t)
	sdb := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { _ = sdb.Close() })
	tx, err := sdb.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })

	_, err = runtime.NewClient(runtime.SQL(sdb)).InsertTx(ctx, runtime.SQL(tx), invoice{Customer: "ana", Cents: 1200},
		&runtime.InsertOpts{Tags: []string{"eu"}})
	require.NoError(t, err)
	job := filatest.RequireInsertedTx[invoice](ctx, t, runtime.SQL(tx), &filatest.RequireOpts{Queue: "billing", MaxAttempts: 3, Tags: []string{"eu"}})
	require.Equal(t, invoice{Customer: "ana", Cents: 1200}, job.Args)
	filatest.RequireNotInsertedTx[invoice](ctx, t, runtime.SQL(sdb)) // not before tx commits
	require.Contains(t, fails(t, func(tb testing.TB) {
		filatest.RequireNotInsertedTx[invoice](ctx, tb, runtime.SQL(tx))
	}), `1 job(s) of kind "invoice" were inserted`)
}
