package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// A worker whose role owns fila_jobs vacuums it: the dead row versions
// retention leaves are gone at once, not at autovacuum's next visit.
func TestVacuumAfterRetention(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ALTER TABLE fila_jobs SET (autovacuum_enabled = false);
		INSERT INTO fila_jobs (kind, state, finished_at) SELECT 'k', 'completed', now() - interval '2 days' FROM generate_series(1, 5000);
		SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	// The insert's counts reach the statistics when its session flushes
	// them, which may be after the vacuum's own count: that one is
	// absolute, and the insert's +5 000 added after it showed 5 000 live
	// rows in a table vacuum had just found empty. Wait for them first.
	liveRows := func() (n int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'fila_jobs'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return liveRows() == 5000 }, 30*time.Second, 20*time.Millisecond,
		"the insert's counts in the statistics")
	r, err := New(Config{DSN: db.DSN, Kinds: []Kind{{Name: "k", Handler: func(context.Context, *Job) error { return nil }}},
		Mode: ModePoll, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	require.NoError(t, r.open(ctx))
	defer r.closePools()
	require.True(t, r.mayVacuum(ctx), "the test's role owns the table")
	require.EqualValues(t, 5000, r.retention(ctx, "completed", 24*time.Hour))
	vacuums := func() (n int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'fila_jobs'`).Scan(&n))
		return n
	}
	before := vacuums()
	r.vacuum(ctx)
	require.Equal(t, before+1, vacuums(), "the worker vacuumed the table")
	require.Zero(t, liveRows(), "vacuum counted the rows retention left: none")
}
