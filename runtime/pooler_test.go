package runtime_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// A ListenDSN that leads to PgBouncer makes Run fail at once with one error
// that says what to do, instead of listening to nothing.
func TestListenDSNThroughPgBouncerFailsRun(t *testing.T) {
	t.Parallel()
	const pgbouncerAddr = "127.0.0.1:6432"
	pb := os.Getenv("FILA_TEST_PGBOUNCER_URL")
	if pb == "" {
		c, err := net.DialTimeout("tcp", pgbouncerAddr, time.Second)
		if err != nil {
			testdb.Missing(t, "no PgBouncer answers at %s (scripts/setup.sh starts one): %v", pgbouncerAddr, err)
		}
		_ = c.Close()
		pb = "postgres://postgres@" + pgbouncerAddr + "/postgres"
	}
	db := newDB(t)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	cfg.ListenDSN = testdb.WithDatabase(t, pb, db.Name)
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = rt.Run(ctx)
	took := time.Since(start)
	require.Error(t, err)
	require.True(t, errors.Is(err, listener.ErrPooler), "got %v", err)
	require.Contains(t, err.Error(), "ListenDSN")
	require.Contains(t, err.Error(), "PostgreSQL directly")
	require.Less(t, took, 30*time.Second, "Run must fail promptly, not retry")
	select {
	case <-rt.Ready():
		t.Fatal("Ready closed although nothing listens")
	default:
	}
	t.Logf("Run failed after %s: %v", took.Round(time.Millisecond), err)
}
