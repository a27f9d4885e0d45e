package claimer_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

var kinds = []string{"k"}

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

// statesByKey is how Finish left each attempt.
func statesByKey(fin []claimer.Finished) map[claimer.AttemptKey]string {
	m := make(map[claimer.AttemptKey]string, len(fin))
	for _, f := range fin {
		m[f.Key] = f.State
	}
	return m
}

func jobRow(t *testing.T, db *testdb.DB, id int64) (state string, attempts int, lastErr string) {
	t.Helper()
	var le *string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT state, attempts, last_error FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&state, &attempts, &le))
	if le != nil {
		lastErr = *le
	}
	return state, attempts, lastErr
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

	res, err := s.Claim(ctx, "default", kinds, nil, 2, 30*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, first, res.Jobs[0].ID)
	require.Equal(t, second, res.Jobs[1].ID)
	require.Equal(t, 1, res.Jobs[0].Attempt.Attempt)
	require.False(t, res.Jobs[0].StartedAt.IsZero())
	require.Equal(t, "default", res.Jobs[0].Queue)
	require.False(t, res.HasNextDue, "a full batch does not look for the next due time")

	res, err = s.Claim(ctx, "default", kinds, nil, 10, 30*time.Second)
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

// A claim takes only the kinds asked for: workers on one queue that handle
// different kinds never take each other's jobs.
func TestClaimTakesOnlyItsKinds(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	a := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('ka') RETURNING id`)
	b := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('kb') RETURNING id`)
	insert(t, db, `INSERT INTO fila_jobs (kind, run_at) VALUES ('kb', now() + interval '1 hour') RETURNING id`)
	// Leases of two hours, so the next due time is the scheduled job's when
	// it is this worker's kind, and a lease's otherwise.
	res, err := s.Claim(ctx, "default", []string{"ka"}, nil, 10, 2*time.Hour)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, a, res.Jobs[0].ID)
	require.Equal(t, "ka", res.Jobs[0].Kind)
	// Another kind's scheduled job is not this worker's timer: at most, when
	// none of the next hundred is its kind, it wakes at the hundredth's time.
	require.False(t, res.HasNextDue && res.NextDue < 50*time.Minute, "woken before anything it may run could be due")
	res, err = s.Claim(ctx, "default", []string{"kb"}, nil, 10, 2*time.Hour)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, b, res.Jobs[0].ID)
	require.True(t, res.HasNextDue)
	require.InDelta(t, time.Hour, res.NextDue, float64(time.Minute))
}

// Jobs scheduled for later are skipped within each priority, and a claim
// still finds due jobs of a later priority behind them.
func TestClaimWalksPrioritiesPastScheduledJobs(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, priority, run_at)
		SELECT 'k', (i % 3)::smallint, now() + interval '1 hour' FROM generate_series(1, 3000) AS i`)
	require.NoError(t, err)
	p2 := insert(t, db, `INSERT INTO fila_jobs (kind, priority) VALUES ('k', 2) RETURNING id`)
	p1 := insert(t, db, `INSERT INTO fila_jobs (kind, priority) VALUES ('k', 1) RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, []int64{p1, p2}, []int64{res.Jobs[0].ID, res.Jobs[1].ID}, "lower priority number first")
	require.True(t, res.HasNextDue)
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
	res, err := s.Claim(cctx, "default", kinds, nil, 10, time.Minute)
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
	for i := 0; i < 5; i++ {
		insert(t, db, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ('k', 2) RETURNING id`)
	}
	res, err := s.Claim(ctx, "default", kinds, nil, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 5)
	ok, retry, perm, stale, otherStart := res.Jobs[0], res.Jobs[1], res.Jobs[2], res.Jobs[3], res.Jobs[4]
	wrongAttempt := stale.Attempt
	wrongAttempt.Attempt++
	wrongStart := otherStart.Attempt
	wrongStart.StartedAt = wrongStart.StartedAt.Add(-time.Microsecond)
	fin, err := s.Finish(ctx, []claimer.Outcome{
		{Attempt: ok.Attempt, OK: true},
		{Attempt: retry.Attempt, Err: "try later", Delay: 2 * time.Second},
		{Attempt: perm.Attempt, Err: "bad input", Permanent: true},
		{Attempt: wrongAttempt, OK: true}, // not this worker's attempt
		{Attempt: wrongStart, OK: true},   // the same count, another claim
	})
	require.NoError(t, err)
	got := map[int64]claimer.Finished{}
	for _, f := range fin {
		got[f.Key.ID] = f
	}
	require.Equal(t, "completed", got[ok.ID].State)
	require.Equal(t, ok.Key(), got[ok.ID].Key, "results are matched to the attempt asked about")
	require.Equal(t, "pending", got[retry.ID].State)
	require.InDelta(t, 2*time.Second, got[retry.ID].DueIn, float64(500*time.Millisecond))
	require.Equal(t, "dead", got[perm.ID].State)
	require.Equal(t, claimer.StateFenced, got[stale.ID].State)
	require.Equal(t, claimer.StateFenced, got[otherStart.ID].State)
	state, _, lastErr := jobRow(t, db, retry.ID)
	require.Equal(t, "pending", state)
	require.Equal(t, "try later", lastErr)
	state, _, _ = jobRow(t, db, stale.ID)
	require.Equal(t, "running", state, "a fenced outcome changes nothing")
	state, _, _ = jobRow(t, db, otherStart.ID)
	require.Equal(t, "running", state, "a fenced outcome changes nothing")

	var history string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors::text FROM fila_jobs WHERE id = $1::bigint`, retry.ID).Scan(&history))
	require.Contains(t, history, `"error": "try later"`)
	require.Contains(t, history, `"attempt": 1`)
}

// An error text PostgreSQL cannot store (NUL, invalid UTF-8) is made
// storable: the outcome is written, with the error readable.
func TestFinishStoresUnstorableErrorText(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	j := res.Jobs[0]
	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: j.Attempt, Err: "bad \x00 \xff\xfe end", Delay: time.Second}})
	require.NoError(t, err)
	require.Equal(t, "pending", fin[0].State)
	_, _, lastErr := jobRow(t, db, j.ID)
	require.Equal(t, "bad \u2400 \uFFFD end", lastErr)
}

func TestStorableText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "plain", claimer.StorableText("plain", 100))
	require.Equal(t, "a\u2400b", claimer.StorableText("a\x00b", 100))
	require.Equal(t, "x\uFFFDy", claimer.StorableText("x\xffy", 100))
	// Cut on a rune boundary, with the ellipsis inside the limit.
	long := strings.Repeat("é", 100) // 200 bytes
	for max := 4; max < 40; max++ {
		got := claimer.StorableText(long, max)
		require.True(t, utf8.ValidString(got), "max %d: %q", max, got)
		require.LessOrEqual(t, len(got), max)
		require.True(t, strings.HasSuffix(got, "…"))
	}
}

func TestFinishSkipsLockedRow(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	j := res.Jobs[0]
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, j.ID)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	fin, err := s.Finish(cctx, []claimer.Outcome{{Attempt: j.Attempt, OK: true}})
	require.NoError(t, err, "finish must not wait on the lock")
	require.Equal(t, claimer.StateSkipped, fin[0].State)
	require.NoError(t, tx.Rollback(ctx))
	fin, err = s.Finish(ctx, []claimer.Outcome{{Attempt: j.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", fin[0].State)
}

func TestRescueHeartbeatRelease(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	// Attempts whose workers heartbeated them, then stopped: they count.
	expired := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, lease_until, started_at, heartbeat_at)
		VALUES ('k', 'running', 1, now() - interval '1 second', now() - interval '1 minute', now() - interval '50 seconds') RETURNING id`)
	spent := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, max_attempts, lease_until, started_at, heartbeat_at)
		VALUES ('k', 'running', 3, 3, now() - interval '1 second', now() - interval '1 minute', now() - interval '50 seconds') RETURNING id`)
	for i := 0; i < 3; i++ {
		insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	}
	var expiredStart time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT started_at FROM fila_jobs WHERE id = $1::bigint`, expired).Scan(&expiredStart))

	res, err := s.Claim(ctx, "other-queue", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, res.Rescued, "any claim rescues expired leases of every queue")
	st, _, le := jobRow(t, db, expired)
	require.Equal(t, "pending", st)
	require.Contains(t, le, "lease expired")
	st, _, _ = jobRow(t, db, spent)
	require.Equal(t, "dead", st)

	res, err = s.Claim(ctx, "default", kinds, nil, 5, time.Minute)
	require.NoError(t, err)
	var alive, cancelled, locked *claimer.Job
	for _, j := range res.Jobs {
		switch {
		case j.ID == expired:
			require.Equal(t, 2, j.Attempt.Attempt, "the rescued job runs again as its second attempt")
		case alive == nil:
			alive = j
		case cancelled == nil:
			cancelled = j
		default:
			locked = j
		}
	}
	require.NotNil(t, locked)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'cancelled', finished_at = now(), lease_until = NULL WHERE id = $1::bigint`, cancelled.ID)
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, locked.ID)
	require.NoError(t, err)
	stale := claimer.Attempt{ID: expired, Attempt: 1, StartedAt: expiredStart}

	got, err := s.Heartbeat(ctx, []claimer.Attempt{alive.Attempt, cancelled.Attempt, locked.Attempt, stale}, 2*time.Minute)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, claimer.Kept, got[alive.Key()])
	require.Equal(t, claimer.Cancelled, got[cancelled.Key()])
	require.Equal(t, claimer.Busy, got[locked.Key()])
	require.Equal(t, claimer.Lost, got[stale.Key()], "the rescued attempt is no longer owned")

	// Release returns the attempt at once, without counting it, and the
	// update trigger wakes the queue's workers.
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN fila_default")
	require.NoError(t, err)
	n, err := s.Release(ctx, []claimer.Attempt{alive.Attempt}, "shutting down")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, attempts, _ := jobRow(t, db, alive.ID)
	require.Equal(t, "pending", st)
	require.Equal(t, 0, attempts, "an interrupted attempt is not counted")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = conn.WaitForNotification(wctx)
	require.NoError(t, err)
	// The interrupted attempt's late result cannot touch the next claim of
	// the same count.
	res, err = s.Claim(ctx, "default", kinds, nil, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, alive.Attempt.Attempt, res.Jobs[0].Attempt.Attempt)
	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: alive.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, claimer.StateFenced, fin[0].State)
}

func TestDeleteFinished(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	for _, state := range []string{"completed", "dead", "cancelled"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, finished_at)
			SELECT 'k', $1::text, now() - interval '2 days' FROM generate_series(1, 25)`, state)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, finished_at) VALUES ('k', $1::text, now())`, state)
		require.NoError(t, err)
	}
	for _, state := range []string{"completed", "dead", "cancelled"} {
		n, err := s.DeleteFinished(ctx, state, 24*time.Hour, 10)
		require.NoError(t, err)
		require.EqualValues(t, 10, n, "one small batch")
		for n == 10 {
			n, err = s.DeleteFinished(ctx, state, 24*time.Hour, 10)
			require.NoError(t, err)
		}
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = $1::text`, state).Scan(&left))
		require.Equal(t, 1, left, "the recent %s job is kept", state)
	}
	_, err := s.DeleteFinished(ctx, "running", time.Hour, 10)
	require.ErrorContains(t, err, "not a finished state")
}

// Two attempts of one job with the same count (an interrupted attempt was
// given back, or an operator retried the job) are told apart by their start:
// only the current one is kept or written.
func TestSameCountAttemptsToldApart(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	old := res.Jobs[0].Attempt
	n, err := s.Release(ctx, []claimer.Attempt{old}, "test")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	res, err = s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	cur := res.Jobs[0].Attempt
	require.Equal(t, old.Attempt, cur.Attempt)
	require.NotEqual(t, old.StartedAt, cur.StartedAt)

	// In either order: the row of a job listed twice is updated for one of
	// them, and the other must still be reported.
	for _, order := range [][]claimer.Attempt{{old, cur}, {cur, old}} {
		got, err := s.Heartbeat(ctx, order, time.Minute)
		require.NoError(t, err)
		require.Equal(t, claimer.Lost, got[old.Key()])
		require.Equal(t, claimer.Kept, got[cur.Key()])
	}

	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: cur, Err: "x", Delay: time.Second}, {Attempt: old, OK: true}})
	require.NoError(t, err)
	require.Len(t, fin, 2)
	byKey := statesByKey(fin)
	require.Equal(t, claimer.StateFenced, byKey[old.Key()])
	require.Equal(t, "pending", byKey[cur.Key()])
}

// A limited kind runs at most Max jobs per key at once, across claims; a
// freed slot is taken by the next job of its key; a job whose payload lacks
// the key shares the "" key.
func TestClaimRespectsConcurrencyLimits(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'import', jsonb_build_object('account', jsonb_build_object('id', i % 2)) FROM generate_series(1, 8) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('import', '{}'), ('import', '{}'), ('free', '{}')`)
	require.NoError(t, err)
	limits := []claimer.KindLimit{{Kind: "import", Key: "account.id", Max: 2}}
	kinds := []string{"import", "free"}
	keys := func(jobs []*claimer.Job) map[string]int {
		n := map[string]int{}
		for _, j := range jobs {
			var key *string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT concurrency_key FROM fila_jobs WHERE id = $1::bigint`, j.ID).Scan(&key))
			if key == nil {
				n["<none>"]++
			} else {
				n[*key]++
			}
		}
		return n
	}
	res, err := s.Claim(ctx, "default", kinds, limits, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"0": 2, "1": 2, "": 2, "<none>": 1}, keys(res.Jobs), "two per key, and the unlimited kind")
	require.False(t, res.HasNextDue && res.NextDue < 30*time.Second, "jobs waiting for a slot set no timer")

	res, err = s.Claim(ctx, "default", kinds, limits, 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs, "every key is full")

	// One job of key 1 finishes: one more of key 1 runs, none of key 0.
	var done claimer.Attempt
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id, attempts, started_at FROM fila_jobs
		WHERE state = 'running' AND concurrency_key = '1' LIMIT 1`).Scan(&done.ID, &done.Attempt, &done.StartedAt))
	_, err = s.Finish(ctx, []claimer.Outcome{{Attempt: done, OK: true}})
	require.NoError(t, err)
	res, err = s.Claim(ctx, "default", kinds, limits, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"1": 1}, keys(res.Jobs))
}

// A key that is full does not hide the jobs of other keys behind it: 1 200
// jobs of one account, enqueued first, then one of another account; with
// the first account's slot taken, one claim takes the other's job, and
// one claim takes a job of each of several free keys behind them.
func TestClaimFullKeyHidesNoOtherKey(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	limits := []claimer.KindLimit{{Kind: "import", Key: "account", Max: 1}}
	kinds := []string{"import"}
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'import', '{"account": "a"}' FROM generate_series(1, 1200)`)
	require.NoError(t, err)
	res, err := s.Claim(ctx, "default", kinds, limits, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "account a has one slot")

	b := insert(t, db, `INSERT INTO fila_jobs (kind, payload) VALUES ('import', '{"account": "b"}') RETURNING id`)
	res, err = s.Claim(ctx, "default", kinds, limits, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "account b's job, behind 1 199 of full account a")
	require.Equal(t, b, res.Jobs[0].ID)

	// Several keys behind the full ones, each taken in the same claim.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'import', jsonb_build_object('account', 'c' || (i % 3)) FROM generate_series(1, 9) AS i`)
	require.NoError(t, err)
	res, err = s.Claim(ctx, "default", kinds, limits, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 3, "one job of each of c0, c1, c2")

	res, err = s.Claim(ctx, "default", kinds, limits, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs, "every key is full")
}

// A paused queue gives nothing to claim until it is resumed, and resuming
// wakes its listeners.
func TestPausedQueueClaimsNothing(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_queues (queue, paused) VALUES ('default', true)`)
	require.NoError(t, err)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs)
	require.False(t, res.HasNextDue)

	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN fila_default")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_queues SET paused = false WHERE queue = 'default'`)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = conn.WaitForNotification(wctx)
	require.NoError(t, err, "resuming wakes the queue's workers")
	res, err = s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
}

// A running job deleted by hand is no longer anyone's: its heartbeat says
// lost and its outcome is fenced, rather than reported locked and written
// again forever.
func TestOutcomeOfADeletedJob(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	insert(t, db, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, 2) RETURNING 1`)
	res, err := s.Claim(ctx, "default", kinds, nil, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	gone, kept := res.Jobs[0].Attempt, res.Jobs[1].Attempt
	_, err = db.Pool.Exec(ctx, `DELETE FROM fila_jobs WHERE id = $1::bigint`, gone.ID)
	require.NoError(t, err)

	got, err := s.Heartbeat(ctx, []claimer.Attempt{gone, kept}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, claimer.Lost, got[gone.Key()])
	require.Equal(t, claimer.Kept, got[kept.Key()])

	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: gone, OK: true}, {Attempt: kept, OK: true}})
	require.NoError(t, err)
	require.Len(t, fin, 2)
	byKey := statesByKey(fin)
	require.Equal(t, claimer.StateFenced, byKey[gone.Key()])
	require.Equal(t, "completed", byKey[kept.Key()])
}

// The outcome statements read each outcome's row through the primary key
// once, whichever plan PL/pgSQL caches: no plan scans the input list again
// per outcome. Such a plan made a finish of 886 outcomes compare every pair
// (784 110 rows filtered, 239 ms) once the cache had switched to a generic
// plan. auto_explain, loaded into the test's own backend, sends each
// statement's plan back as a message; the session asks for generic plans
// so that a function relying on custom ones is caught at its first call.
func TestOutcomePlansAreLinear(t *testing.T) {
	t.Parallel()
	_, db := newStore(t)
	ctx := context.Background()
	const n = 300
	conn, plans := explainedConn(t, db,
		`SET plan_cache_mode = force_generic_plan`,
		// Which join method the planner picks for two lists depends on
		// estimates an array parameter hides (ten elements, whatever its
		// length), so the test leaves it only nested loops: a statement
		// that is linear only when the planner guesses a hash join fails.
		`SET enable_hashjoin = off`,
		`SET enable_mergejoin = off`)
	// A table analyzed while it held a backlog, as a busy queue's is: the
	// planner expects few of its rows to match.
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, $1::int)`, 20*n)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE fila_jobs`)
	require.NoError(t, err)
	s := claimer.New(conn)
	res, err := s.Claim(ctx, "default", kinds, nil, n, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, n)
	owned := make([]claimer.Attempt, n)
	outs := make([]claimer.Outcome, 0, n)
	var plain []claimer.Outcome // plain successes: the lean completion
	for i, j := range res.Jobs {
		owned[i] = j.Attempt
		switch {
		case i >= 2*n/3:
			plain = append(plain, claimer.Outcome{Attempt: j.Attempt, OK: true})
		case i >= n/3:
			outs = append(outs, claimer.Outcome{Attempt: j.Attempt, OK: i%2 == 0, Err: "no", Delay: time.Second})
		}
	}
	plans.reset()

	got, err := s.Heartbeat(ctx, owned, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, n)
	released, err := s.Release(ctx, owned[:n/3], "test")
	require.NoError(t, err)
	require.Equal(t, n/3, released)
	fin, err := s.Finish(ctx, outs)
	require.NoError(t, err)
	require.Len(t, fin, len(outs))
	for _, f := range fin {
		require.NotEqual(t, claimer.StateSkipped, f.State)
	}
	fin, err = s.Finish(ctx, plain)
	require.NoError(t, err)
	require.Len(t, fin, len(plain))
	for _, f := range fin {
		require.Equal(t, "completed", f.State)
	}

	all := plans.text()
	for _, fn := range []string{"fila_heartbeat", "fila_release", "fila_finish", "fila_complete"} {
		require.Contains(t, all, "PL/pgSQL function "+fn, "no plan of %s was sent", fn)
	}
	// A scan of an input list or of a CTE repeated per outcome is the
	// quadratic shape; index probes repeated per outcome are expected.
	rescan := regexp.MustCompile(`(CTE Scan|Function Scan) on \w+.*loops=(\d+)`)
	filtered := regexp.MustCompile(`Rows Removed by Join Filter: (\d+)`)
	for _, line := range strings.Split(all, "\n") {
		if m := rescan.FindStringSubmatch(line); m != nil {
			require.Equal(t, "1", m[2], "an input scanned again per outcome: %s\n%s", line, all)
		}
		if m := filtered.FindStringSubmatch(line); m != nil {
			k, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			require.Less(t, k, n, "outcomes compared pairwise: %s\n%s", line, all)
		}
	}
}

// planLog collects the plans auto_explain sends a connection as notices.
type planLog struct {
	mu    sync.Mutex
	plans []string
}

func (l *planLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.plans = nil
}

func (l *planLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.plans, "\n")
}

// explainedConn opens a direct connection whose backend sends the plan of
// every statement it runs, nested ones included, with the counts of its
// run, after running settings.
func explainedConn(t *testing.T, db *testdb.DB, settings ...string) (*pgx.Conn, *planLog) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.DirectDSN)
	require.NoError(t, err)
	log := &planLog{}
	cfg.OnNotice = func(_ *pgconn.PgConn, m *pgconn.Notice) {
		log.mu.Lock()
		defer log.mu.Unlock()
		log.plans = append(log.plans, m.Message+"\n"+m.Where)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(context.Background())) })
	for _, q := range append([]string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_analyze = on`,
		`SET auto_explain.log_nested_statements = on`,
	}, append(settings, `SET client_min_messages = log`)...) {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	return conn, log
}

// TestClaimPlanOfASmallTableScansNoTable: the claim plans its statement
// once per connection, so a worker that starts on an empty table keeps the
// plan made for it. That plan must not read the whole table, which grows.
func TestClaimPlanOfASmallTableScansNoTable(t *testing.T) {
	t.Parallel()
	_, db := newStore(t)
	ctx := context.Background()
	conn, plans := explainedConn(t, db)
	s := claimer.New(conn)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs)

	// The table grows: a history of finished jobs, a few running, one
	// waiting.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, attempts, finished_at)
		SELECT 'k', 'completed', 1, now() FROM generate_series(1, 5000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, attempts, lease_until, started_at)
		SELECT 'k', 'running', 1, now() + interval '1 hour', now() FROM generate_series(1, 50)`)
	require.NoError(t, err)
	id := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	plans.reset()
	res, err = s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, id, res.Jobs[0].ID)

	all := plans.text()
	require.Contains(t, all, "PL/pgSQL function fila_claim", "no plan of the claim was sent")
	require.NotRegexp(t, `Seq Scan on fila_jobs`, all, "the claim reads the whole table:\n%s", all)
}

// ClaimID takes the job it names only while it is pending, runnable, in
// the caller's queue and of one of its kinds, and its queue is not paused:
// through fila_claim_id, and as the prepared statement direct connections
// send.
func TestClaimIDOnlyARunnableJob(t *testing.T) {
	t.Parallel()
	t.Run("function", func(t *testing.T) {
		t.Parallel()
		s, db := newStore(t)
		testClaimIDOnlyARunnableJob(t, s, db)
	})
	t.Run("direct", func(t *testing.T) {
		t.Parallel()
		_, db := newStore(t)
		testClaimIDOnlyARunnableJob(t, directStore(t, db), db)
	})
}

// directStore is a Store on a direct pool that prepares its statements, as
// the runtime's is when it reaches PostgreSQL without a pooler.
func directStore(t *testing.T, db *testdb.DB) *claimer.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), db.DirectDSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := claimer.New(pool)
	s.SetStatementMode(pgconfig.HotPathMode(true))
	return s
}

// The claim by id that direct connections send is fila_claim_id's own
// statement, its parameters in place of the function's.
func TestDirectClaimIDIsTheFunctionsStatement(t *testing.T) {
	t.Parallel()
	_, db := newStore(t)
	var src string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT prosrc FROM pg_proc WHERE proname = 'fila_claim_id'`).Scan(&src))
	_, body, ok := strings.Cut(src, "RETURN QUERY")
	require.True(t, ok, "fila_claim_id runs no RETURN QUERY:\n%s", src)
	body, _, ok = strings.Cut(body, ";")
	require.True(t, ok, "fila_claim_id's statement does not end:\n%s", src)
	for param, arg := range map[string]string{
		`\bp_id\b`: "$$1::bigint", `\bp_queue\b`: "$$2::text", `\bp_kinds\b`: "$$3::text[]",
		`\bp_lease_ms\b`: "$$4::float8", `\bp_worker\b`: "$$5::text",
	} {
		body = regexp.MustCompile(param).ReplaceAllString(body, arg)
	}
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	direct, ok := strings.CutPrefix(claimer.SQLClaimIDDirect, "/* fila_claim_id */")
	require.True(t, ok, "the direct statement is not named")
	require.Equal(t, words(body), words(direct))
}

func testClaimIDOnlyARunnableJob(t *testing.T, s *claimer.Store, db *testdb.DB) {
	ctx := context.Background()
	ready := insert(t, db, `INSERT INTO fila_jobs (kind, payload, priority) VALUES ('k', '{"a":1}', 3) RETURNING id`)
	later := insert(t, db, `INSERT INTO fila_jobs (kind, run_at) VALUES ('k', now() + interval '1 hour') RETURNING id`)
	other := insert(t, db, `INSERT INTO fila_jobs (kind, queue) VALUES ('k', 'other') RETURNING id`)
	otherKind := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('x') RETURNING id`)
	done := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, finished_at) VALUES ('k', 'completed', 1, now()) RETURNING id`)

	for _, id := range []int64{later, other, otherKind, done, 1 << 40} {
		j, err := s.ClaimID(ctx, id, "default", kinds, time.Minute)
		require.NoError(t, err)
		require.Nil(t, j, "job %d", id)
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_queues (queue, paused) VALUES ('default', true)`)
	require.NoError(t, err)
	j, err := s.ClaimID(ctx, ready, "default", kinds, time.Minute)
	require.NoError(t, err)
	require.Nil(t, j, "a job of a paused queue")
	_, err = db.Pool.Exec(ctx, `UPDATE fila_queues SET paused = false`)
	require.NoError(t, err)

	j, err = s.ClaimID(ctx, ready, "default", kinds, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, j)
	require.Equal(t, ready, j.ID)
	require.Equal(t, 1, j.Attempt.Attempt)
	require.Equal(t, "k", j.Kind)
	require.Equal(t, "default", j.Queue)
	require.Equal(t, int16(3), j.Priority)
	require.JSONEq(t, `{"a":1}`, string(j.Payload))
	state, attempts, _ := jobRow(t, db, ready)
	require.Equal(t, "running", state)
	require.Equal(t, 1, attempts)
	again, err := s.ClaimID(ctx, ready, "default", kinds, time.Minute)
	require.NoError(t, err)
	require.Nil(t, again, "a running job claimed twice")
	// The attempt it returns is the one the outcome must name.
	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: j.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", statesByKey(fin)[j.Attempt.Key()])
}

// An attempt whose lease expired before any heartbeat of its own (a claim
// whose reply was lost, so no handler ever ran it) is given back by the
// rescue, not counted: a job with one attempt runs, rather than going to
// dead untried. After three such rescues the attempts count again, so a
// handler that kills its worker at once cannot make a job loop for ever.
func TestRescueGivesBackAnAttemptNobodyStarted(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	id := insert(t, db, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ('k', 1) RETURNING id`)
	lease := time.Minute
	// expire ends the running attempt's lease, as time would.
	expire := func() {
		_, err := db.Pool.Exec(ctx, `UPDATE fila_jobs SET lease_until = now() - interval '1 second' WHERE state = 'running'`)
		require.NoError(t, err)
	}
	for round := 1; round <= 3; round++ {
		// Claimed, and its reply lost: nothing heartbeats it.
		res, err := s.Claim(ctx, "default", kinds, nil, 1, lease)
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1, "round %d", round)
		require.Equal(t, 1, res.Jobs[0].Attempt.Attempt)
		expire()
		res, err = s.Claim(ctx, "other-queue", kinds, nil, 1, lease)
		require.NoError(t, err)
		require.Equal(t, 1, res.Rescued)
		st, attempts, le := jobRow(t, db, id)
		require.Equal(t, "pending", st, "round %d: a job nobody ran is not dead", round)
		require.Zero(t, attempts, "round %d: the attempt is given back", round)
		require.Contains(t, le, "not counted as an attempt")
		var given int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT unstarted_rescues FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&given))
		require.Equal(t, round, given)
	}
	// The fourth time, the attempt counts.
	res, err := s.Claim(ctx, "default", kinds, nil, 1, lease)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	expire()
	_, err = s.Claim(ctx, "other-queue", kinds, nil, 1, lease)
	require.NoError(t, err)
	st, attempts, _ := jobRow(t, db, id)
	require.Equal(t, "dead", st)
	require.Equal(t, 1, attempts)

	// A heartbeat says a worker runs the attempt: its rescue counts it.
	id = insert(t, db, `INSERT INTO fila_jobs (kind, max_attempts) VALUES ('k', 1) RETURNING id`)
	res, err = s.Claim(ctx, "default", kinds, nil, 1, lease)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	got, err := s.Heartbeat(ctx, []claimer.Attempt{res.Jobs[0].Attempt}, lease)
	require.NoError(t, err)
	require.Equal(t, claimer.Kept, got[res.Jobs[0].Key()])
	expire()
	_, err = s.Claim(ctx, "other-queue", kinds, nil, 1, lease)
	require.NoError(t, err)
	st, attempts, le := jobRow(t, db, id)
	require.Equal(t, "dead", st)
	require.Equal(t, 1, attempts)
	require.Contains(t, le, "stopped heartbeating")
}

// A transaction that inserts a row referencing a running job (a foreign key
// to fila_jobs(id), which takes FOR KEY SHARE on the job's row) holds
// nothing of Fila's up: the heartbeat keeps the lease, and the outcome is
// written, while that transaction is still open.
func TestForeignKeyToAJobDoesNotBlockHeartbeatsOrOutcomes(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE receipts (job_id bigint NOT NULL REFERENCES fila_jobs (id))`)
	require.NoError(t, err)
	insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	j := res.Jobs[0]
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO receipts (job_id) VALUES ($1::bigint)`, j.ID)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.Heartbeat(cctx, []claimer.Attempt{j.Attempt}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, claimer.Kept, got[j.Key()], "a foreign key's lock on the row is not a conflict")
	fin, err := s.Finish(cctx, []claimer.Outcome{{Attempt: j.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", fin[0].State)
	require.NoError(t, tx.Commit(ctx))
}

// Under a database whose default isolation is REPEATABLE READ, a claim that
// meets a row another claim changed fails with a serialization failure
// instead of skipping it. The store then sets READ COMMITTED itself, runs
// the claim again, and keeps doing so: concurrent claims never fail, and
// every job is claimed once.
func TestClaimsUnderRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	db.SetDefault(t, "default_transaction_isolation", "repeatable read")
	pcfg, err := pgconfig.Pool(db.DSN) // as the runtime opens its pools
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg) // new sessions take the new default
	require.NoError(t, err)
	defer pool.Close()
	var iso string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso))
	require.Equal(t, "repeatable read", iso)
	const jobs = 600
	_, err = pool.Exec(ctx, `INSERT INTO fila_jobs (kind) SELECT 'k' FROM generate_series(1, $1::int)`, jobs)
	require.NoError(t, err)

	s := claimer.New(pool)
	var mu sync.Mutex
	claimed := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				res, err := s.Claim(ctx, "default", kinds, nil, 3, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if len(res.Jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range res.Jobs {
					claimed[j.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, claimed, jobs)
	for id, n := range claimed {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
	t.Logf("explicit isolation after the claims: %v", s.ExplicitSession())
}

// Unique states that leave running out (one queued while one runs) let a
// job with the same key be enqueued while the first runs. Every statement
// that moves the first back to pending (a retry, the rescue of its lease, a
// release) finds the key taken: that job is cancelled, the newer one runs
// instead, and nothing else in the same statement is held back.
func TestUniqueKeyTakenWhileRunning(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	// Three jobs with keys held only while pending, each running when a
	// newer job with its key is enqueued; and a job without a key.
	keyed := func(key string) int64 {
		return insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', $1::text, '{pending}') RETURNING id`, key)
	}
	keyed("retry")
	keyed("rescue")
	keyed("release")
	plain := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 4)
	byKey := map[string]*claimer.Job{}
	for _, j := range res.Jobs {
		var key *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT unique_key FROM fila_jobs WHERE id = $1::bigint`, j.ID).Scan(&key))
		if key != nil {
			byKey[*key] = j
		} else {
			byKey[""] = j
		}
	}
	newer := map[string]int64{}
	for _, k := range []string{"retry", "rescue", "release"} {
		newer[k] = keyed(k)
	}

	// The retry, in one statement with another job's success.
	fin, err := s.Finish(ctx, []claimer.Outcome{
		{Attempt: byKey["retry"].Attempt, Err: "temporary", Delay: time.Second},
		{Attempt: byKey[""].Attempt, OK: true},
	})
	require.NoError(t, err, "one job's taken key fails nobody's outcome")
	states := statesByKey(fin)
	require.Equal(t, "cancelled", states[byKey["retry"].Key()])
	require.Equal(t, "completed", states[byKey[""].Key()])
	st, _, le := jobRow(t, db, byKey["retry"].ID)
	require.Equal(t, "cancelled", st)
	require.Contains(t, le, fmt.Sprintf("is held by job %d, which runs instead", newer["retry"]))
	st, _, _ = jobRow(t, db, plain)
	require.Equal(t, "completed", st)

	// The release.
	n, err := s.Release(ctx, []claimer.Attempt{byKey["release"].Attempt}, "shutting down")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, _, _ = jobRow(t, db, byKey["release"].ID)
	require.Equal(t, "cancelled", st)

	// The rescue, by a claim on another queue: it must not fail.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET lease_until = now() - interval '1 second', heartbeat_at = now()
		WHERE id = $1::bigint`, byKey["rescue"].ID)
	require.NoError(t, err)
	res, err = s.Claim(ctx, "other-queue", kinds, nil, 1, time.Minute)
	require.NoError(t, err, "a rescue whose key is taken fails no claim")
	require.Equal(t, 1, res.Rescued)
	st, _, le = jobRow(t, db, byKey["rescue"].ID)
	require.Equal(t, "cancelled", st)
	require.Contains(t, le, "lease expired")
	require.Contains(t, le, fmt.Sprintf("is held by job %d", newer["rescue"]))

	// The newer jobs run.
	res, err = s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 3)
}

// Unique states of running only (one at a time per key): a claim skips a
// job whose key a running job holds, and takes the others; the job waits,
// pending, until the holder ends, and that end wakes the queue.
func TestClaimSkipsAJobWhoseKeyIsRunning(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	first := insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', 'acct:1', '{running}') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	holder := res.Jobs[0]
	second := insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', 'acct:1', '{running}') RETURNING id`)
	other := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err = s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err, "a job whose key is running fails no claim")
	require.Len(t, res.Jobs, 1)
	require.Equal(t, other, res.Jobs[0].ID)
	j, err := s.ClaimID(ctx, second, "default", kinds, time.Minute)
	require.NoError(t, err)
	require.Nil(t, j, "the claim by id skips it too")

	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "LISTEN fila_default")
	require.NoError(t, err)
	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: holder.Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", fin[0].State)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = conn.WaitForNotification(wctx)
	require.NoError(t, err, "the holder's end wakes the queue")
	res, err = s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Equal(t, second, res.Jobs[0].ID)
	_ = first
}

// Unique states of completed only: two jobs of a key may both run; the
// second to complete keeps its outcome and lets the key go, and the other
// outcomes of its statement are written.
func TestSecondCompletionOfAKeyLetsTheKeyGo(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	for range 2 {
		insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', 'once', '{completed}') RETURNING id`)
	}
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	fin, err := s.Finish(ctx, []claimer.Outcome{{Attempt: res.Jobs[0].Attempt, OK: true}})
	require.NoError(t, err)
	require.Equal(t, "completed", fin[0].State)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, claimer.CompleteTx(ctx, tx, res.Jobs[1].Attempt, nil), "completing in the handler's transaction too")
	require.NoError(t, tx.Commit(ctx))
	var keys []*string
	rows, err := db.Pool.Query(ctx, `SELECT unique_key FROM fila_jobs WHERE state = 'completed' ORDER BY id`)
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[*string])
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.NotNil(t, keys[0])
	require.Nil(t, keys[1], "the second completion let the key go")
}

// A row written by hand with errors that are not a list (here {}), running
// with an expired lease, is rescued like any other: its old value is kept
// as the first entry, and no claim fails.
func TestRescueOfARowWhoseErrorsAreNotAList(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	odd := insert(t, db, `INSERT INTO fila_jobs (kind, state, attempts, lease_until, started_at, heartbeat_at, errors)
		VALUES ('k', 'running', 1, now() - interval '1 second', now() - interval '1 minute', now() - interval '50 seconds', '{}') RETURNING id`)
	plain := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 10, time.Minute)
	require.NoError(t, err, "an odd row fails nobody's claim")
	require.Equal(t, 1, res.Rescued)
	var claimed []int64
	for _, j := range res.Jobs {
		claimed = append(claimed, j.ID)
	}
	require.Contains(t, claimed, plain)
	var errs string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT errors::text FROM fila_jobs WHERE id = $1::bigint`, odd).Scan(&errs))
	require.True(t, strings.HasPrefix(errs, "[{}, {"), errs)
	require.Contains(t, errs, "lease expired")
}

// Each claim records the Store's worker as the attempt's owner, from the
// head of the queue, through a limited kind's slot check, and by id; a
// Store without one records none.
func TestClaimRecordsTheWorker(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	worker := func(id int64) *string {
		var w *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT worker FROM fila_jobs WHERE id = $1`, id).Scan(&w))
		return w
	}
	anon := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	res, err := s.Claim(ctx, "default", kinds, nil, 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1)
	require.Nil(t, worker(anon), "no worker set")

	s.SetWorker("host/1/aa")
	head := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	limited := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('lim') RETURNING id`)
	res, err = s.Claim(ctx, "default", []string{"k", "lim"}, []claimer.KindLimit{{Kind: "lim", Max: 1}}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	byID := insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	j, err := s.ClaimID(ctx, byID, "default", kinds, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, j)
	for _, id := range []int64{head, limited, byID} {
		require.NotNil(t, worker(id), "job %d", id)
		require.Equal(t, "host/1/aa", *worker(id), "job %d", id)
	}
}

// A rate-limited kind starts at most Max jobs per key in a period, across
// claims; the claim that finds every key out of starts says when the first
// start frees, and a start counts no longer than its period.
func TestClaimRespectsRateLimits(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'api', jsonb_build_object('account', CASE WHEN i <= 5 THEN 'a' ELSE 'b' END) FROM generate_series(1, 7) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind) VALUES ('free')`)
	require.NoError(t, err)
	rates := []claimer.KindRate{{Kind: "api", Key: "account", Max: 2, Period: time.Hour}}
	kinds := []string{"api", "free"}
	accounts := func(jobs []*claimer.Job) map[string]int {
		n := map[string]int{}
		for _, j := range jobs {
			var acc *string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload->>'account' FROM fila_jobs WHERE id = $1::bigint`, j.ID).Scan(&acc))
			if acc == nil {
				n["<none>"]++
			} else {
				n[*acc]++
			}
		}
		return n
	}
	res, err := s.ClaimRated(ctx, "default", kinds, nil, rates, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 2, "b": 2, "<none>": 1}, accounts(res.Jobs), "two starts per account, and the unlimited kind")

	// Their outcomes free no start: a start counts for its period.
	outcomes := make([]claimer.Outcome, len(res.Jobs))
	for i, j := range res.Jobs {
		outcomes[i] = claimer.Outcome{Attempt: j.Attempt, OK: true}
	}
	_, err = s.Finish(ctx, outcomes)
	require.NoError(t, err)
	res, err = s.ClaimRated(ctx, "default", kinds, nil, rates, 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs, "both accounts are out of starts")
	require.True(t, res.HasNextDue, "the claim says when a start frees")
	require.Greater(t, res.NextDue, 59*time.Minute)
	require.LessOrEqual(t, res.NextDue, time.Hour)

	// Account a's first start ends its period (its until is moved to the
	// past, as an hour passing would): one more start of a, none of b.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_rate_starts SET until = now() - interval '1 ms'
		WHERE job_id = (SELECT min(job_id) FROM fila_rate_starts WHERE key = 'a')`)
	require.NoError(t, err)
	res, err = s.ClaimRated(ctx, "default", kinds, nil, rates, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1}, accounts(res.Jobs))
	res, err = s.ClaimRated(ctx, "default", kinds, nil, rates, 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs)

	// Rows that stopped counting are deleted a minute later, by the claim
	// of their key or by retention.
	var counted int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_rate_starts`).Scan(&counted))
	require.Equal(t, 5, counted, "the start whose period just ended is kept for a minute")
	_, err = db.Pool.Exec(ctx, `UPDATE fila_rate_starts SET until = now() - interval '61 s'
		WHERE job_id IN (SELECT job_id FROM fila_rate_starts WHERE key = 'a' ORDER BY job_id LIMIT 2)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_rate_starts SET until = now() - interval '61 s'
		WHERE job_id = (SELECT min(job_id) FROM fila_rate_starts WHERE key = 'b')`)
	require.NoError(t, err)
	deleted, err := s.DeleteRateStarts(ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 3, deleted)
	require.NoError(t, err)
	res, err = s.ClaimRated(ctx, "default", kinds, nil, rates, 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1}, accounts(res.Jobs), "a's second start ended its period too")
}

// A kind with a concurrency limit and a rate limit starts a job only when
// both allow: one at a time, three per period.
func TestClaimCombinesRateAndConcurrencyLimits(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'api', jsonb_build_object('account', 'a', 'region', 'eu') FROM generate_series(1, 5)`)
	require.NoError(t, err)
	limits := []claimer.KindLimit{{Kind: "api", Key: "account", Max: 1}}
	rates := []claimer.KindRate{{Kind: "api", Key: "region", Max: 3, Period: time.Hour}}
	kinds := []string{"api"}
	started := 0
	for range 5 {
		res, err := s.ClaimRated(ctx, "default", kinds, limits, rates, 100, time.Minute)
		require.NoError(t, err)
		if len(res.Jobs) == 0 {
			break
		}
		require.Len(t, res.Jobs, 1, "one slot")
		started++
		_, err = s.Finish(ctx, []claimer.Outcome{{Attempt: res.Jobs[0].Attempt, OK: true}})
		require.NoError(t, err)
	}
	require.Equal(t, 3, started, "three starts per period")
	var keys []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(DISTINCT key) FROM fila_rate_starts`).Scan(&keys))
	require.Equal(t, []string{"eu"}, keys, "starts count per rate key, the region")
}

// The claim of rate-limited kinds reads indexes only, on a table whose
// plan was made while it was small.
func TestClaimPlanOfRateLimitsScansNoTable(t *testing.T) {
	t.Parallel()
	_, db := newStore(t)
	ctx := context.Background()
	conn, plans := explainedConn(t, db)
	s := claimer.New(conn)
	rates := []claimer.KindRate{{Kind: "k", Key: "account", Max: 1, Period: time.Hour}}
	limits := []claimer.KindLimit{{Kind: "k", Key: "account", Max: 1}}
	res, err := s.ClaimRated(ctx, "default", kinds, limits, rates, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, res.Jobs)

	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, attempts, finished_at)
		SELECT 'k', 'completed', 1, now() FROM generate_series(1, 5000)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_rate_starts (kind, key, job_id, started_at, until)
		SELECT 'k', 'acc' || i, i, now(), now() + interval '1 hour' FROM generate_series(1, 5000) AS i`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
		SELECT 'k', jsonb_build_object('account', 'acc' || (i % 3)) FROM generate_series(1, 30) AS i`)
	require.NoError(t, err)
	plans.reset()
	res, err = s.ClaimRated(ctx, "default", kinds, limits, rates, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "acc0 has a start left; acc1 and acc2 have none")

	all := plans.text()
	require.Contains(t, all, "PL/pgSQL function fila_claim", "no plan of the claim was sent")
	require.Contains(t, all, "fila_rate_starts", "no plan of the rate limit's statements was sent")
	require.NotRegexp(t, `Seq Scan on (fila_jobs|fila_rate_starts)`, all, "the claim reads a whole table:\n%s", all)
}

// A batch of plain successes goes through the lean completion; what it
// leaves (an attempt no longer this worker's, a row locked, a job whose
// unique key another job took meanwhile) is written by fila_finish, which
// says what became of each, in the same Finish.
func TestPlainSuccessesReportEveryAttempt(t *testing.T) {
	t.Parallel()
	s, db := newStore(t)
	ctx := context.Background()
	keyed := insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', 'acct:1', '{pending,completed}') RETURNING id`)
	for range 4 {
		insert(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k') RETURNING id`)
	}
	res, err := s.Claim(ctx, "default", kinds, nil, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 5)
	byID := map[int64]*claimer.Job{}
	var plain []*claimer.Job
	for _, j := range res.Jobs {
		byID[j.ID] = j
		if j.ID != keyed {
			plain = append(plain, j)
		}
	}
	// Enqueued while the keyed job runs: its states leave running out.
	taker := insert(t, db, `INSERT INTO fila_jobs (kind, unique_key, unique_states) VALUES ('k', 'acct:1', '{pending,completed}') RETURNING id`)
	stale := plain[1].Attempt
	stale.Attempt++
	locked := plain[2]
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM fila_jobs WHERE id = $1::bigint FOR UPDATE`, locked.ID)
	require.NoError(t, err)

	outs := []claimer.Outcome{
		{Attempt: plain[0].Attempt, OK: true},
		{Attempt: stale, OK: true},
		{Attempt: locked.Attempt, OK: true},
		{Attempt: plain[3].Attempt, OK: true},
		{Attempt: byID[keyed].Attempt, OK: true},
	}
	fin, err := s.Finish(ctx, outs)
	require.NoError(t, err)
	require.Len(t, fin, len(outs))
	got := statesByKey(fin)
	require.Equal(t, "completed", got[plain[0].Attempt.Key()])
	require.Equal(t, "completed", got[plain[3].Attempt.Key()])
	require.Equal(t, claimer.StateFenced, got[stale.Key()])
	require.Equal(t, claimer.StateSkipped, got[locked.Attempt.Key()])
	require.Equal(t, "completed", got[byID[keyed].Attempt.Key()])

	state, _, _ := jobRow(t, db, plain[1].ID)
	require.Equal(t, "running", state, "a fenced outcome changes nothing")
	var key *string
	var lastErr string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT unique_key, last_error FROM fila_jobs WHERE id = $1::bigint`, keyed).
		Scan(&key, &lastErr))
	require.Nil(t, key, "the completed job lets its key go to the job that took it")
	require.Contains(t, lastErr, strconv.FormatInt(taker, 10))
	state, _, _ = jobRow(t, db, taker)
	require.Equal(t, "pending", state)
}
