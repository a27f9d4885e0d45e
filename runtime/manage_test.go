package runtime_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// seedJob writes one job in the given state as a worker would have left it
// (a running job holds a lease an hour long, a finished one has finished_at,
// a dead one an error), so every state can be listed without running a
// worker.
func seedJobInState(t *testing.T, db *testdb.DB, kind, queue, state string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
INSERT INTO fila_jobs (kind, queue, state, attempts, max_attempts, lease_until, started_at, finished_at, last_error)
VALUES ($1::text, $2::text, $3::text,
        CASE WHEN $3::text = 'pending' THEN 0 WHEN $3::text = 'dead' THEN 3 ELSE 1 END,
        3,
        CASE WHEN $3::text = 'running' THEN now() + interval '1 hour' END,
        CASE WHEN $3::text <> 'pending' THEN now() END,
        CASE WHEN $3::text IN ('completed', 'dead', 'cancelled') THEN now() END,
        CASE WHEN $3::text = 'dead' THEN 'boom' END)
RETURNING id`, kind, queue, state).Scan(&id))
	return id
}

func rowIDs(rows []runtime.JobRow) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestListJobsFiltersAndLimits(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	pending := seedJobInState(t, db, "mail", "default", "pending")
	running := seedJobInState(t, db, "mail", "default", "running")
	completed := seedJobInState(t, db, "resize", "images", "completed")
	dead1 := seedJobInState(t, db, "mail", "default", "dead")
	cancelled := seedJobInState(t, db, "resize", "images", "cancelled")
	dead2 := seedJobInState(t, db, "resize", "images", "dead")

	all, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, []int64{dead2, cancelled, dead1, completed, running, pending}, rowIDs(all), "newest first")
	for _, j := range all {
		require.Nil(t, j.Payload, "a listing carries no payloads")
		require.Nil(t, j.Errors, "a listing carries no error histories")
	}

	for state, want := range map[string][]int64{
		"pending": {pending}, "running": {running}, "completed": {completed},
		"dead": {dead2, dead1}, "cancelled": {cancelled},
	} {
		got, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{State: state})
		require.NoError(t, err)
		require.Equal(t, want, rowIDs(got), state)
		for _, j := range got {
			require.Equal(t, state, j.State)
		}
	}

	got, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Kind: "mail"})
	require.NoError(t, err)
	require.Equal(t, []int64{dead1, running, pending}, rowIDs(got))
	got, err = runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Queue: "images", State: "dead"})
	require.NoError(t, err)
	require.Equal(t, []int64{dead2}, rowIDs(got))
	require.Equal(t, "boom", got[0].LastError)
	require.Equal(t, "resize", got[0].Kind)
	require.NotNil(t, got[0].FinishedAt)

	// Pages of two, newest first.
	page1, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{dead2, cancelled}, rowIDs(page1))
	page2, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Limit: 2, BeforeID: page1[1].ID})
	require.NoError(t, err)
	require.Equal(t, []int64{dead1, completed}, rowIDs(page2))

	none, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Kind: "nothing-of-this-kind"})
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)

	for _, bad := range []struct {
		f    runtime.JobFilter
		want string
	}{
		{runtime.JobFilter{State: "failed"}, `state "failed" is unknown`},
		{runtime.JobFilter{Limit: -1}, "Limit -1 out of range"},
		{runtime.JobFilter{Limit: runtime.ListLimitMax + 1}, "out of range"},
		{runtime.JobFilter{Queue: "has space"}, "queue name"},
		{runtime.JobFilter{BeforeID: -3}, "BeforeID -3 is negative"},
	} {
		_, err := runtime.ListJobs(ctx, db.Pool, bad.f)
		require.ErrorContains(t, err, bad.want, "%+v", bad.f)
	}
}

// TestListJobsUsesStateIndexes reads the plan of a listing by state on a
// table of mostly completed rows: each state is read from its partial index
// (or, for completed rows, the primary key walked from the newest end),
// never by a scan of the whole table.
func TestListJobsUsesStateIndexes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, state, attempts, started_at, finished_at)
SELECT 'bulk', 'completed', 1, now(), now() FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	for _, s := range runtime.JobStates() {
		seedJobInState(t, db, "mail", "default", s)
	}
	_, err = db.Pool.Exec(ctx, "ANALYZE fila_jobs")
	require.NoError(t, err)

	for state, index := range map[string]string{
		"pending":   "fila_jobs_pending_idx|fila_jobs_scheduled_idx",
		"running":   "fila_jobs_lease_idx",
		"dead":      "fila_jobs_dead_idx",
		"cancelled": "fila_jobs_cancelled_idx",
		"completed": "fila_jobs_pkey|fila_jobs_finished_idx",
		"scheduled": "fila_jobs_pending_idx|fila_jobs_scheduled_idx",
		"retrying":  "fila_jobs_pending_idx|fila_jobs_scheduled_idx",
		"":          "fila_jobs_pkey",
	} {
		plan := explainList(t, db, state)
		require.NotContains(t, plan, "Seq Scan", "state %q: %s", state, plan)
		require.Regexp(t, index, plan, "state %q", state)
	}
}

// explainList returns the plan of the statement ListJobs runs for a filter
// on one state, as PostgreSQL plans it with the parameters ListJobs binds.
func explainList(t *testing.T, db *testdb.DB, state string) string {
	t.Helper()
	e := &explainingDB{DB: db.Pool}
	_, err := runtime.ListJobs(context.Background(), e, runtime.JobFilter{State: state})
	require.NoError(t, err)
	require.Len(t, e.plans, 1)
	return e.plans[0]
}

// explainingDB records the plan of each query before running it.
type explainingDB struct {
	runtime.DB
	plans []string
}

func (e *explainingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := e.DB.Query(ctx, "EXPLAIN "+sql, args...)
	if err != nil {
		return nil, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	e.plans = append(e.plans, strings.Join(lines, "\n"))
	return e.DB.Query(ctx, sql, args...)
}

func idText(id int64) string { return strconv.FormatInt(id, 10) }

func TestGetJobShowsErrorHistory(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	id, err := runtime.Insert(ctx, db.Pool, "mail", map[string]string{"to": "ana"}, &runtime.InsertOpts{Priority: -2})
	require.NoError(t, err)
	// The history as the runtime writes it, and one element written by hand
	// with PostgreSQL's own spelling of a time.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'dead', attempts = 3, max_attempts = 3,
    started_at = now(), finished_at = now(), last_error = 'third',
    errors = jsonb_build_array(
        jsonb_build_object('attempt', 1, 'at', '2026-01-02T03:04:05.123456+00:00'::timestamptz, 'error', 'first'),
        jsonb_build_object('attempt', 2, 'at', '2026-01-02 03:04:06.5+00', 'error', 'second'),
        jsonb_build_object('attempt', 3, 'at', now(), 'error', 'third'))
WHERE id = $1::bigint`, id)
	require.NoError(t, err)

	j, err := runtime.GetJob(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, id, j.ID)
	require.Equal(t, "dead", j.State)
	require.Equal(t, int16(-2), j.Priority)
	require.JSONEq(t, `{"to":"ana"}`, string(j.Payload))
	require.Equal(t, "third", j.LastError)
	require.Len(t, j.Errors, 3)
	for i, want := range []string{"first", "second", "third"} {
		require.Equal(t, i+1, j.Errors[i].Attempt)
		require.Equal(t, want, j.Errors[i].Error)
		require.False(t, j.Errors[i].At.IsZero(), "attempt %d's time", i+1)
	}
	require.True(t, j.Errors[0].At.Equal(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)), j.Errors[0].At)
	require.True(t, j.Errors[1].At.Equal(time.Date(2026, 1, 2, 3, 4, 6, 500000000, time.UTC)), j.Errors[1].At)

	fresh, err := runtime.Insert(ctx, db.Pool, "mail", nil, nil)
	require.NoError(t, err)
	j, err = runtime.GetJob(ctx, db.Pool, fresh)
	require.NoError(t, err)
	require.NotNil(t, j.Errors)
	require.Empty(t, j.Errors)
	require.Empty(t, j.LastError)
	require.Nil(t, j.FinishedAt)

	_, err = runtime.GetJob(ctx, db.Pool, fresh+1000)
	require.ErrorIs(t, err, runtime.ErrJobNotFound)
	require.ErrorContains(t, err, "job")
}

func TestRetryPutsDeadAndCancelledJobsBack(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	dead := seedJobInState(t, db, "mail", "default", "dead")
	cancelled := seedJobInState(t, db, "mail", "default", "cancelled")
	running := seedJobInState(t, db, "mail", "default", "running")
	completed := seedJobInState(t, db, "mail", "default", "completed")
	pending := seedJobInState(t, db, "mail", "default", "pending")
	missing := pending + 1000

	res, err := runtime.Retry(ctx, db.Pool, dead, cancelled, running, completed, pending, missing, dead)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: dead, From: "dead"}, {ID: cancelled, From: "cancelled"}, {ID: completed, From: "completed"}}, res.Changed)
	require.Equal(t, []int64{dead, cancelled, completed}, res.IDs())
	reasons := map[int64]string{}
	for _, s := range res.Skipped {
		reasons[s.ID] = s.Reason
	}
	require.Len(t, res.Skipped, 3)
	require.Contains(t, reasons[running], "is running: cancel it first")
	require.Contains(t, reasons[pending], "already pending")
	require.Contains(t, reasons[missing], "does not exist")
	require.ErrorContains(t, res.Err(), "does not exist")

	for _, id := range []int64{dead, cancelled, completed} {
		j, err := runtime.GetJob(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, "pending", j.State)
		require.Zero(t, j.Attempts)
		require.Nil(t, j.FinishedAt)
		require.Nil(t, j.LeaseUntil)
		var due bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT run_at <= now() FROM fila_jobs WHERE id = $1::bigint", id).Scan(&due))
		require.True(t, due, "job %d is due now", id)
	}
	j, err := runtime.GetJob(ctx, db.Pool, dead)
	require.NoError(t, err)
	require.Equal(t, "boom", j.LastError, "the last error stays after a retry")
	for _, id := range []int64{running, pending} {
		before, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{BeforeID: id + 1, Limit: 1})
		require.NoError(t, err)
		require.Equal(t, id, before[0].ID)
		require.NotEqual(t, "cancelled", before[0].State)
	}

	empty, err := runtime.Retry(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, empty.Changed)
	require.NoError(t, empty.Err())
}

func TestManagementRunsInCallersTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	dead := seedJobInState(t, db, "mail", "default", "dead")
	pending := seedJobInState(t, db, "mail", "default", "pending")
	state := func(id int64) string {
		s, _, _ := jobState(t, db, id)
		return s
	}

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := runtime.Retry(ctx, tx, dead)
	require.NoError(t, err)
	require.Len(t, res.Changed, 1)
	res, err = runtime.Cancel(ctx, tx, pending)
	require.NoError(t, err)
	require.Len(t, res.Changed, 1)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, "dead", state(dead), "rolled back with the caller's transaction")
	require.Equal(t, "pending", state(pending))

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = runtime.Retry(ctx, tx, dead)
	require.NoError(t, err)
	_, err = runtime.Cancel(ctx, tx, pending)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "pending", state(dead))
	require.Equal(t, "cancelled", state(pending))
}

func TestRetryWhereSelectsDeadJobsByKindAndQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	mailDead := []int64{seedJobInState(t, db, "mail", "default", "dead"), seedJobInState(t, db, "mail", "default", "dead"), seedJobInState(t, db, "mail", "default", "dead")}
	otherQueue := seedJobInState(t, db, "mail", "bulk", "dead")
	otherKind := seedJobInState(t, db, "resize", "default", "dead")
	cancelled := seedJobInState(t, db, "mail", "default", "cancelled")

	res, err := runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{Kind: "mail", Queue: "default", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, mailDead[:2], res.IDs(), "the oldest first, up to the limit")
	for _, c := range res.Changed {
		require.Equal(t, "dead", c.From)
	}
	res, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{Kind: "mail"})
	require.NoError(t, err)
	require.Equal(t, []int64{mailDead[2], otherQueue}, res.IDs())
	for id, want := range map[int64]string{otherKind: "dead", cancelled: "cancelled", mailDead[0]: "pending"} {
		s, _, _ := jobState(t, db, id)
		require.Equal(t, want, s, "job %d", id)
	}
	res, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{State: "cancelled"})
	require.NoError(t, err)
	require.Equal(t, []int64{cancelled}, res.IDs())

	_, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{State: "running"})
	require.ErrorContains(t, err, "running jobs cannot be retried")
	_, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{State: "gone"})
	require.ErrorContains(t, err, `state "gone" is unknown`)
}

// TestRetriedDeadJobRunsAtOnce: with the safety poll at ten minutes, only
// the wake of the update to pending explains a retried job being picked up.
func TestRetriedDeadJobRunsAtOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var calls atomic.Int32
	start(t, baseConfig(t, db, runtime.Kind{Name: "once-broken", Handler: func(ctx context.Context, j *runtime.Job) error {
		if calls.Add(1) == 1 {
			return runtime.Permanent(errors.New("broken the first time"))
		}
		return nil
	}}))
	id, err := runtime.Insert(ctx, db.Pool, "once-broken", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "job dead", func() bool { s, _, _ := jobState(t, db, id); return s == "dead" })

	res, err := runtime.Retry(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, res.IDs())
	retried := time.Now()
	waitFor(t, 10*time.Second, "retried job completed (the safety poll is 10 minutes)", func() bool {
		s, _, _ := jobState(t, db, id)
		return s == "completed"
	})
	t.Logf("retried job completed %s after the retry", time.Since(retried).Round(time.Millisecond))
	s, attempts, lastErr := jobState(t, db, id)
	require.Equal(t, "completed", s)
	require.Equal(t, 1, attempts, "attempts counted again from 0")
	require.Contains(t, lastErr, "broken the first time", "the earlier error stays readable")
	require.EqualValues(t, 2, calls.Load())
}

// TestCancelledPendingJobNeverRuns: a cancelled job ahead of another one in
// the queue (a lower priority number runs first) is not run when the
// worker starts and runs the one behind it.
func TestCancelledPendingJobNeverRuns(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	first, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Priority: -10})
	require.NoError(t, err)
	second, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	res, err := runtime.Cancel(ctx, db.Pool, first)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: first, From: "pending"}}, res.Changed)

	ran := make(chan int64, 2)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.ID
		return nil
	}})
	cfg.Concurrency = 1
	start(t, cfg)
	waitFor(t, 10*time.Second, "the job behind it completed", func() bool { s, _, _ := jobState(t, db, second); return s == "completed" })
	require.Equal(t, second, <-ran)
	require.Empty(t, ran, "the cancelled job ran")
	s, attempts, _ := jobState(t, db, first)
	require.Equal(t, "cancelled", s)
	require.Zero(t, attempts)

	res, err = runtime.Cancel(ctx, db.Pool, first, second)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	require.Equal(t, []runtime.JobSkip{
		{ID: first, State: "cancelled", Reason: "job " + idText(first) + " is already cancelled"},
		{ID: second, State: "completed", Reason: "job " + idText(second) + " is already completed"},
	}, res.Skipped)
}

func TestDeleteRefusesRunningJob(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan int64, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- j.ID
		<-ctx.Done()
		return context.Cause(ctx)
	}})
	// Heartbeats every second: the cancelled handler stops soon after.
	cfg.Lease = 3 * time.Second
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "hold", nil, nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("job not started")
	}
	finished := seedJobInState(t, db, "mail", "default", "completed")

	res, err := runtime.Delete(ctx, db.Pool, id, finished)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: finished, From: "completed"}}, res.Changed)
	require.Equal(t, []runtime.JobSkip{{ID: id, State: "running", Reason: "job " + idText(id) + " is running: cancel it first"}}, res.Skipped)
	s, _, _ := jobState(t, db, id)
	require.Equal(t, "running", s)
	_, err = runtime.GetJob(ctx, db.Pool, finished)
	require.ErrorIs(t, err, runtime.ErrJobNotFound)

	res, err = runtime.Cancel(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: id, From: "running"}}, res.Changed)
	res, err = runtime.Delete(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, res.IDs())
}

// TestCancelledRunningJobIsStopped: the handler of a running job that is
// cancelled sees ErrCancelled as its context's cause, and nothing is written
// for that attempt.
func TestCancelledRunningJobIsStopped(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	cfg := baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return errors.New("stopped")
	}})
	cfg.Lease = 3 * time.Second // heartbeats every second
	rt := start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "hold", nil, nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("job not started")
	}
	res, err := runtime.Cancel(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: id, From: "running"}}, res.Changed)
	select {
	case cause := <-stopped:
		require.ErrorIs(t, cause, runtime.ErrCancelled)
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled job's handler still runs")
	}
	waitFor(t, 10*time.Second, "the runtime let go of the attempt", func() bool { return rt.Stats().Running == 0 })
	j, err := runtime.GetJob(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Equal(t, "cancelled", j.State)
	require.Equal(t, 1, j.Attempts)
	require.Empty(t, j.LastError, "no outcome is written for a cancelled attempt")
	require.Empty(t, j.Errors)
	require.NotNil(t, j.FinishedAt)
	// The table keeps the cancelled attempt's lease, by which a retry
	// waits; it is no one's lease, and is not shown as one.
	require.Nil(t, j.LeaseUntil, "a cancelled job shows no lease")
	var kept *time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT lease_until FROM fila_jobs WHERE id = $1`, id).Scan(&kept))
	require.NotNil(t, kept)
	listed, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{State: "cancelled"})
	require.NoError(t, err)
	require.Nil(t, listed[0].LeaseUntil)
	preview, err := runtime.PreviewJob(ctx, db.Pool, id, 0)
	require.NoError(t, err)
	require.Nil(t, preview.LeaseUntil)
}

// TestRetryAfterCancelNeverRunsTwiceAtOnce: retrying a job the moment it
// was cancelled while running does not start it again beside the attempt
// its worker has not stopped yet; it runs once that attempt's lease ends.
func TestRetryAfterCancelNeverRunsTwiceAtOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var running, most, starts atomic.Int32
	cfg := baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if starts.Add(1) > 1 {
			return nil
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}})
	cfg.Lease = 3 * time.Second
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "hold", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "first attempt running", func() bool { return running.Load() == 1 })

	_, err = runtime.Cancel(ctx, db.Pool, id)
	require.NoError(t, err)
	res, err := runtime.Retry(ctx, db.Pool, id)
	require.NoError(t, err)
	require.Len(t, res.Changed, 1)
	require.NotNil(t, res.Changed[0].RunsAt, "due when the cancelled attempt's lease ends")
	retried := time.Now()
	waitFor(t, 30*time.Second, "retried job completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	t.Logf("completed %s after the retry (lease 3s)", time.Since(retried).Round(time.Millisecond))
	require.EqualValues(t, 2, starts.Load())
	require.EqualValues(t, 1, most.Load(), "the job ran twice at once")
}

// The scheduled and retrying views of the pending state: due later
// (scheduled ahead, or waiting out a retry backoff), and pending again
// after a failed attempt.
func TestListJobsScheduledAndRetrying(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	seed := func(attempts int, runAt string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, attempts, run_at, last_error)
			VALUES ('k', $1::int, now() + $2::interval, CASE WHEN $1::int > 0 THEN 'failed' END) RETURNING id`, attempts, runAt).Scan(&id))
		return id
	}
	due := seed(0, "0 seconds")
	ahead := seed(0, "1 hour")
	backoff := seed(1, "1 minute")
	dueRetry := seed(2, "-1 second")
	seedJobInState(t, db, "k", "default", "dead")
	for state, want := range map[string][]int64{
		"pending":   {dueRetry, backoff, ahead, due},
		"scheduled": {backoff, ahead},
		"retrying":  {dueRetry, backoff},
	} {
		got, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{State: state})
		require.NoError(t, err)
		require.Equal(t, want, rowIDs(got), state)
		for _, j := range got {
			require.Equal(t, "pending", j.State, "a view shows the job's own state")
		}
	}
	require.Equal(t, []string{"held", "waiting", "pending", "running", "completed", "dead", "cancelled", "scheduled", "retrying"}, runtime.ListStates())
}

// CancelWhere and DeleteWhere change the jobs a filter selects, in one
// statement, and refuse the states they cannot change.
func TestCancelWhereAndDeleteWhere(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	mail1 := seedJobInState(t, db, "mail", "default", "pending")
	mail2 := seedJobInState(t, db, "mail", "default", "pending")
	other := seedJobInState(t, db, "sms", "default", "pending")
	running := seedJobInState(t, db, "mail", "default", "running")
	elsewhere := seedJobInState(t, db, "mail", "bulk", "pending")

	res, err := runtime.CancelWhere(ctx, db.Pool, runtime.JobFilter{State: "pending", Kind: "mail", Queue: "default"})
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: mail1, From: "pending"}, {ID: mail2, From: "pending"}}, res.Changed)
	require.Empty(t, res.Skipped)
	res, err = runtime.CancelWhere(ctx, db.Pool, runtime.JobFilter{State: "running"})
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: running, From: "running"}}, res.Changed)
	for id, want := range map[int64]string{mail1: "cancelled", mail2: "cancelled", running: "cancelled", other: "pending", elsewhere: "pending"} {
		j, err := runtime.GetJob(ctx, db.Pool, id)
		require.NoError(t, err)
		require.Equal(t, want, j.State, "job %d", id)
	}
	res, err = runtime.CancelWhere(ctx, db.Pool, runtime.JobFilter{State: "pending", Kind: "mail", Limit: 5})
	require.NoError(t, err)
	require.Equal(t, []int64{elsewhere}, res.IDs())

	// Deleted: the two oldest cancelled jobs of kind mail below an id.
	res, err = runtime.DeleteWhere(ctx, db.Pool, runtime.JobFilter{State: "cancelled", Kind: "mail", BeforeID: elsewhere, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: mail1, From: "cancelled"}, {ID: mail2, From: "cancelled"}}, res.Changed)
	_, err = runtime.GetJob(ctx, db.Pool, mail1)
	require.ErrorIs(t, err, runtime.ErrJobNotFound)
	_, err = runtime.GetJob(ctx, db.Pool, running)
	require.NoError(t, err, "outside the limit")

	for _, bad := range []struct {
		cancel bool
		f      runtime.JobFilter
		want   string
	}{
		{true, runtime.JobFilter{}, "give the state of the jobs to cancel"},
		{true, runtime.JobFilter{State: "dead"}, "dead jobs are finished already"},
		{true, runtime.JobFilter{State: "lost"}, `state "lost" is unknown`},
		{true, runtime.JobFilter{State: "pending", Queue: "a b"}, "queue name"},
		{false, runtime.JobFilter{}, "give the state of the jobs to delete"},
		{false, runtime.JobFilter{State: "running"}, "running jobs cannot be deleted: cancel them first"},
		{false, runtime.JobFilter{State: "completed"}, "completed jobs are deleted by retention"},
		{false, runtime.JobFilter{State: "dead", Limit: -1}, "Limit -1 is negative"},
	} {
		var err error
		if bad.cancel {
			_, err = runtime.CancelWhere(ctx, db.Pool, bad.f)
		} else {
			_, err = runtime.DeleteWhere(ctx, db.Pool, bad.f)
		}
		require.ErrorContains(t, err, bad.want, "%+v", bad.f)
	}
}
