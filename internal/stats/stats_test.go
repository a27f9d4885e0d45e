package stats_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

func TestCollect(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind, state, run_at, last_error, started_at, finished_at, lease_until) VALUES
		('a', 'k', 'pending', now() - interval '10 seconds', NULL, NULL, NULL, NULL),
		('a', 'k', 'pending', now() + interval '1 hour', NULL, NULL, NULL, NULL),
		('a', 'k', 'completed', now(), NULL, now() - interval '200 ms', now(), NULL),
		('b', 'mail', 'dead', now(), 'smtp refused', now(), now(), NULL),
		('b', 'mail', 'running', now(), NULL, now(), NULL, now() - interval '1 second')`)
	require.NoError(t, err)
	s, err := stats.Collect(ctx, db.Pool)
	require.NoError(t, err)
	require.Contains(t, s.States, stats.QueueState{Queue: "a", State: "pending", Jobs: 2})
	require.Contains(t, s.States, stats.QueueState{Queue: "b", State: "dead", Jobs: 1})
	require.Len(t, s.Lag, 1)
	require.Equal(t, int64(1), s.Lag[0].Runnable)
	require.Equal(t, int64(1), s.Lag[0].Scheduled)
	require.InDelta(t, 10, s.Lag[0].OldestAgeSecond, 2)
	require.Equal(t, []stats.KindDead{{Kind: "mail", Dead: 1, LastError: "smtp refused"}}, s.Dead)
	require.Len(t, s.RunTimes, 1)
	require.InDelta(t, 200, s.RunTimes[0].P95Ms, 1)
	require.Equal(t, int64(1), s.ExpiredLeases)
	require.GreaterOrEqual(t, s.NotificationQueueUsage, 0.0)
}
