// Package testrt holds what the tests of several packages need to run Fila
// against a real database: a migrated database of their own, a runtime that
// runs until the test ends, and waiting for a condition.
package testrt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// Migrated returns a fresh database of the test's own with Fila's tables:
// a copy of a template that the process's first call migrates (see
// testdb.NewFrom), since migrating costs the server about as much as
// creating the database. The package's TestMain drops the template
// (testdb.DropTemplates).
func Migrated(t testing.TB) *testdb.DB {
	t.Helper()
	key, err := migrationsKey()
	require.NoError(t, err)
	return testdb.NewFrom(t, key, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := migrations.Migrate(ctx, pool)
		return err
	})
}

// migrationsKey names the template after a digest of every migration, so
// that a process never copies a database migrated by other scripts.
var migrationsKey = sync.OnceValues(func() (string, error) {
	all, err := migrations.All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00%s\x00", m.Version, m.Name, m.Up, m.Down)
	}
	return "m" + hex.EncodeToString(h.Sum(nil))[:16], nil
})

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
