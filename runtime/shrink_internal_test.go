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

// A claim that runs out of time is sent again with half as many jobs, down
// to what the database can do in time, instead of the same claim timing out
// for ever; the worker's row says so, and the backlog drains. Here each
// claimed row costs 30 ms (a trigger sleeps), and a claim has 1 s: a claim
// of 100 rows takes 3 s, of 50 still 1.5, and one of 25 fits with room for
// a loaded machine's delays (300 ms for 10-ms rows did not: under four busy
// loops, claims of a single row ran out of time).
func TestClaimThatRunsOutOfTimeShrinks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `
		CREATE FUNCTION slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.03); RETURN NEW; END $$;
		CREATE TRIGGER slow_claim BEFORE UPDATE ON fila_jobs FOR EACH ROW
		WHEN (OLD.state = 'pending' AND NEW.state = 'running') EXECUTE FUNCTION slow_claim();
		INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, 150)`)
	require.NoError(t, err)
	r, err := New(Config{DSN: db.DSN, Kinds: []Kind{{Name: "k", Handler: func(context.Context, *Job) error { return nil }}},
		Mode: ModePoll, PollMin: 10 * time.Millisecond, Concurrency: 100, ClaimBatch: 100, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	r.claimTimeout = time.Second
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { stop(); <-done }()

	var degraded string
	require.Eventually(t, func() bool {
		_ = db.Pool.QueryRow(ctx, `SELECT coalesce(max(degraded), '') FROM fila_workers`).Scan(&degraded)
		return degraded != ""
	}, 30*time.Second, 20*time.Millisecond, "the worker's row never said its claims were cut")
	t.Logf("fila_workers.degraded: %s", degraded)
	require.Contains(t, degraded, "claims on queue default take at most")
	require.Eventually(t, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'completed'`).Scan(&n)
		return n == 150
	}, 2*time.Minute, 50*time.Millisecond, "the backlog did not drain")
	require.Less(t, int(r.producerList()[0].batchCap.Load()), 100)
}
