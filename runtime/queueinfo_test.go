package runtime_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// TestListAndDescribeQueues: counts by state per queue, the oldest
// runnable job's wait, paused queues without jobs, and a queue never used.
func TestListAndDescribeQueues(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	seedJobInState(t, db, "mail", "default", "pending")
	seedJobInState(t, db, "mail", "default", "pending")
	seedJobInState(t, db, "mail", "default", "running")
	seedJobInState(t, db, "resize", "images", "dead")
	seedJobInState(t, db, "resize", "images", "completed")
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, queue, run_at, created_at)
VALUES ('resize', 'images', now() + interval '1 hour', now()),
       ('mail', 'default', now() - interval '90 seconds', now() - interval '90 seconds')`)
	require.NoError(t, err)
	require.NoError(t, runtime.PauseQueue(ctx, db.Pool, "quiet"))

	qs, err := runtime.ListQueues(ctx, db.Pool)
	require.NoError(t, err)
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	require.Equal(t, []string{"default", "images", "quiet"}, names)
	def := qs[0]
	require.EqualValues(t, 3, def.Runnable)
	require.EqualValues(t, 1, def.Running)
	require.False(t, def.Paused)
	require.GreaterOrEqual(t, def.OldestRunnableSeconds, 89.0, "the oldest runnable job is due since 90 s")
	img := qs[1]
	require.EqualValues(t, 0, img.Runnable)
	require.EqualValues(t, 1, img.Scheduled)
	require.EqualValues(t, 1, img.Dead)
	require.Zero(t, img.OldestRunnableSeconds)
	require.True(t, qs[2].Paused)

	one, err := runtime.DescribeQueue(ctx, db.Pool, "images")
	require.NoError(t, err)
	require.Equal(t, img, one)
	unused, err := runtime.DescribeQueue(ctx, db.Pool, "never-used")
	require.NoError(t, err)
	require.Equal(t, runtime.QueueInfo{Name: "never-used"}, unused)
	_, err = runtime.DescribeQueue(ctx, db.Pool, "has space")
	require.ErrorContains(t, err, "queue name")
}
