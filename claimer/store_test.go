package claimer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

func newStore(t *testing.T) (*claimer.Store, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	_, err := migrations.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	return claimer.New(db.Pool), db
}

func insert(t *testing.T, db *testdb.DB, sql string, args ...any) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&id))
	return id
}

func TestClaimOrderLimitAndSchedule(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	low := insert(t, db, `INSERT INTO fila_jobs (kind, priority) VALUES ('k', 5) RETURNING id`)
	first := insert(t, db, `INSERT INTO fila_jobs (kind, priority) VALUES ('k', 0) RETURNING id`)
	second := insert(t, db, `INSERT INTO fila_jobs (kind, priority) VALUES ('k', 0) RETURNING id`)
	insert(t, db, `INSERT INTO fila_jobs (kind, queue) VALUES ('k', 'other') RETURNING id`)
	insert(t, db, `INSERT INTO fila_jobs (kind, run_at) VALUES ('k', now() + interval '3 seconds') RETURNING id`)

	res, err := s.Claim(ctx, "default", 2, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, first, res.Jobs[0].ID)
	require.Equal(t, second, res.Jobs[1].ID)
	require.Equal(t, 1, res.Jobs[0].Attempt)
	require.False(t, res.HasNextDue, "a full batch does not look for the next due time")

	res, err = s.Claim(ctx, "default", 10, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, low, res.Jobs[0].ID)
	require.True(t, res.HasNextDue)
	require.InDelta(t, 3*time.Second, res.NextDue, float64(time.Second), "the scheduled job is due in about 3 s")

	var state string
	var lease time.Duration
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, (lease_until - started_at) FROM fila_jobs WHERE id = $1::bigint`, low).Scan(&state, &lease))
	require.Equal(t, "running", state)
	require.Equal(t, 30*time.Second, lease)
}

func TestClaimSkipsLockedRowsWithoutWaiting(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	}
	// Another session holds the first two rows.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `SELECT id FROM fila_jobs ORDER BY id LIMIT 2 FOR UPDATE`)
	require.NoError(t, err)
	held, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := s.Claim(cctx, "default", 10, time.Minute)
	require.NoError(t, err, "the claim must not wait for the held rows")
	require.Len(t, res.Jobs, 2)
	for _, j := range res.Jobs {
		require.NotContains(t, held, j.ID)
	}
}

func TestFinishIsFencedAndReportsOutcomes(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		insert(t, db, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ('k', 2) RETURNING id`)
	}
	res, err := s.Claim(ctx, "default", 4, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 4)
	ok, retry, perm, stale := res.Jobs[0], res.Jobs[1], res.Jobs[2], res.Jobs[3]
	fin, err := s.Finish(ctx, []claimer.Outcome{
		{ID: ok.ID, Attempt: ok.Attempt, OK: true},
		{ID: retry.ID, Attempt: retry.Attempt, Err: "try later", Delay: 2 * time.Second},
		{ID: perm.ID, Attempt: perm.Attempt, Err: "bad input", Permanent: true},
		{ID: stale.ID, Attempt: stale.Attempt + 1, OK: true}, // not this worker's attempt
	})
	require.NoError(t, err)
	got := map[int64]claimer.Finished{}
	for _, f := range fin {
		got[f.ID] = f
	}
	require.Equal(t, "completed", got[ok.ID].State)
	require.Equal(t, "pending", got[retry.ID].State)
	require.InDelta(t, 2*time.Second, got[retry.ID].DueIn, float64(500*time.Millisecond))
	require.Equal(t, "dead", got[perm.ID].State)
	require.Equal(t, claimer.StateFenced, got[stale.ID].State)
	var state, lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, last_error FROM fila_jobs WHERE id = $1::bigint`, retry.ID).Scan(&state, &lastErr))
	require.Equal(t, "pending", state)
	require.Equal(t, "try later", lastErr)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM fila_jobs WHERE id = $1::bigint`, stale.ID).Scan(&state))
	require.Equal(t, "running", state, "a fenced outcome changes nothing")
}

func TestFinishSkipsLockedRow(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", 1, time.Minute)
	require.NoError(t, err)
	j := res.Jobs[0]
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, j.ID)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	fin, err := s.Finish(cctx, []claimer.Outcome{{ID: j.ID, Attempt: j.Attempt, OK: true}})
	require.NoError(t, err, "finish must not wait on the lock")
	require.Equal(t, claimer.StateSkipped, fin[0].State)
	require.NoError(t, tx.Rollback(ctx))
	fin, err = s.Finish(ctx, []claimer.Outcome{{ID: j.ID, Attempt: j.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", fin[0].State)
}

func TestRescueHeartbeatRelease(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	expired := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, lease_until) VALUES ('k', 'running', 1, now() - interval '1 second') RETURNING id`)
	spent := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, max_attempts, lease_until) VALUES ('k', 'running', 3, 3, now() - interval '1 second') RETURNING id`)
	alive := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, lease_until) VALUES ('k', 'running', 1, now() + interval '1 minute') RETURNING id`)

	res, err := s.Claim(ctx, "other-queue", 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, res.Rescued, "any claim rescues expired leases of every queue")
	state := func(id int64) (st string, le string) {
		var l *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state, last_error FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&st, &l))
		if l != nil {
			le = *l
		}
		return
	}
	st, le := state(expired)
	require.Equal(t, "pending", st)
	require.Contains(t, le, "lease expired")
	st, _ = state(spent)
	require.Equal(t, "dead", st)
	st, _ = state(alive)
	require.Equal(t, "running", st)

	kept, err := s.Heartbeat(ctx, []claimer.Attempt{{ID: alive, Attempt: 1}, {ID: expired, Attempt: 1}}, 2*time.Minute)
	require.NoError(t, err)
	require.True(t, kept[alive])
	require.False(t, kept[expired], "the rescued attempt is no longer owned")

	// Release returns the attempt at once and wakes the queue's workers.
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN fila_default")
	require.NoError(t, err)
	n, err := s.Release(ctx, []claimer.Attempt{{ID: alive, Attempt: 1}}, "shutting down")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, le = state(alive)
	require.Equal(t, "pending", st)
	require.Equal(t, "shutting down", le)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = conn.WaitForNotification(wctx)
	require.NoError(t, err)
}

func TestDeleteCompleted(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, finished_at)
		SELECT 'k', 'completed', now() - interval '2 days' FROM generate_series(1, 25)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, finished_at) VALUES ('k', 'completed', now()), ('k', 'dead', now() - interval '2 days')`)
	require.NoError(t, err)
	n, err := s.DeleteCompleted(ctx, 24*time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "one small batch")
	for n == 10 {
		n, err = s.DeleteCompleted(ctx, 24*time.Hour, 10)
		require.NoError(t, err)
	}
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&left))
	require.Equal(t, 2, left, "recent completed and dead jobs are kept")
}
