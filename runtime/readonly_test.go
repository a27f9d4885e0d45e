package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// TestReadOnlyConnectionsAreDropped puts the runtime's connections on a
// server that refuses writes, as a connection left on a demoted primary or
// landed on a standby finds it (SQLSTATE 25006), then makes the server
// writable again. Its claims fail meanwhile; afterwards it claims again
// without a restart, because it dropped the read-only connections instead of
// keeping them until the pool retires them (an hour by default).
//
// The database is made read-only for new sessions (ALTER DATABASE … SET
// default_transaction_read_only) and the runtime's sessions are ended, so
// that the ones it reconnects are read-only; once the setting is reset, only
// new sessions are writable again. The runtime's main DSN is direct here:
// behind PgBouncer the read-only sessions would be the pooler's, which no
// client can drop.
func TestReadOnlyConnectionsAreDropped(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The test's own session, opened while the database is writable, stays
	// writable throughout.
	admin, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	dbName := pgx.Identifier{db.Name}.Sanitize()
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "ALTER DATABASE "+dbName+" RESET default_transaction_read_only")
	})

	ran := make(chan int64, 10)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.ID
		return nil
	}})
	cfg.DSN = db.DirectDSN
	rt := start(t, cfg)

	_, err = admin.Exec(ctx, "ALTER DATABASE "+dbName+" SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	require.NoError(t, err)
	id1, err := runtime.Insert(ctx, admin, "k", nil, nil)
	require.NoError(t, err)

	// The runtime reconnects into read-only sessions and its claims are
	// refused: it drops them, and the ones it opens next are read-only too.
	waitFor(t, 30*time.Second, "a claim refused as read-only", func() bool { return rt.Stats().ReadOnlyResets >= 2 })
	require.Equal(t, "pending", stateOf(t, admin, id1), "no claim can succeed on a read-only server")

	_, err = admin.Exec(ctx, "ALTER DATABASE "+dbName+" RESET default_transaction_read_only")
	require.NoError(t, err)
	began := time.Now()
	select {
	case got := <-ran:
		require.Equal(t, id1, got)
		// The claim backoff caps at 5 s.
		t.Logf("job claimed %s after the server accepted writes again (%d read-only resets)",
			time.Since(began).Round(time.Millisecond), rt.Stats().ReadOnlyResets)
	case <-time.After(30 * time.Second):
		t.Fatalf("the runtime did not claim again within 30 s of the server accepting writes (%d read-only resets)", rt.Stats().ReadOnlyResets)
	}
	waitFor(t, 10*time.Second, "job completed", func() bool { return stateOf(t, admin, id1) == "completed" })
	id2, err := runtime.Insert(ctx, admin, "k", nil, nil)
	require.NoError(t, err)
	select {
	case got := <-ran:
		require.Equal(t, id2, got)
	case <-time.After(30 * time.Second):
		t.Fatal("a job inserted after the recovery was not picked up")
	}
}

func stateOf(t *testing.T, conn *pgx.Conn, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT state FROM fila_jobs WHERE id = $1::bigint", id).Scan(&state))
	return state
}

func TestIsReadOnly(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('k')")
	require.Error(t, err)
	require.True(t, runtime.IsReadOnly(err), "%v", err)
	require.False(t, runtime.IsReadOnly(context.Canceled))
}
