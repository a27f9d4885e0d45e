package suite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// TestFloorClaimsTheNotifiedJob runs the floor's loop on a real database:
// a committed job's notification arrives, the minimal claim takes that very
// job, and the row says so.
func TestFloorClaimsTheNotifiedJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)

	conn, err := listenConn(ctx, db.DirectDSN, floorQueue)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	claim, err := newFloorClaimer(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer claim.close(context.WithoutCancel(ctx))

	claimed := make(chan int64, 10)
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- floorLoop(lctx, conn, claim, func(id int64, _ time.Time) { claimed <- id }) }()

	// LISTEN is in place before the loop starts, so nothing is missed.
	for range 3 {
		id, err := runtime.Insert(ctx, db.Pool, benchKind, nil, nil)
		require.NoError(t, err)
		select {
		case got := <-claimed:
			require.Equal(t, id, got)
		case <-ctx.Done():
			t.Fatalf("job %d not claimed", id)
		}
		var state string
		var attempts int
		var leased bool
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT state, attempts, lease_until > now() + interval '30 seconds' FROM fila_jobs WHERE id = $1`, id).
			Scan(&state, &attempts, &leased))
		require.Equal(t, "running", state)
		require.Equal(t, 1, attempts)
		require.True(t, leased, "leased for the floor's minute")
	}

	// A burst behind one statement (one notification) is drained whole.
	ids, err := runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{{Kind: benchKind}, {Kind: benchKind}, {Kind: benchKind}})
	require.NoError(t, err)
	for _, id := range ids {
		select {
		case got := <-claimed:
			require.Equal(t, id, got, "claimed from the head, in order")
		case <-ctx.Done():
			t.Fatalf("job %d of the burst not claimed", id)
		}
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}
