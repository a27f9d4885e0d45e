// Package testrt holds what the tests of several packages need to run Fila
// against a real database: a migrated database of their own, a runtime that
// runs until the test ends, and waiting for a condition.
package testrt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// Migrated returns a fresh database of the test's own with Fila's tables.
func Migrated(t testing.TB) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := migrations.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	return db
}

// Start runs a runtime until the test ends, stopping it gracefully then,
// and returns once it is ready.
func Start(t testing.TB, cfg runtime.Config) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
		require.NoError(t, <-errc)
	})
	select {
	case <-rt.Ready():
	case err := <-errc:
		t.Fatalf("runtime stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("runtime not ready after 60s")
	}
	return rt
}

// WaitFor polls cond until it holds, and fails the test if it does not
// within the given time.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, within, what, cond)
}
