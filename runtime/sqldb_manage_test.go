package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// step is what one call of manageScenario returned.
type step struct {
	Call  string `json:"call"`
	Value any    `json:"value,omitempty"`
	Err   string `json:"err,omitempty"`
}

// manageScenario makes the same calls of the insert and management API
// through db, with the same rows set by hand through pool between them,
// and returns what each call returned. Two fresh databases given it end
// with the same ids, so what the calls return differs only in its times.
func manageScenario(t *testing.T, pool *pgxpool.Pool, db runtime.DB) []step {
	t.Helper()
	ctx := context.Background()
	var steps []step
	record := func(call string, v any, err error) {
		s := step{Call: call, Value: v}
		if err != nil {
			s.Err = err.Error()
		}
		steps = append(steps, s)
	}
	setup := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}

	ids, err := runtime.InsertMany(ctx, db, []runtime.InsertParams{
		{Kind: "a", Payload: map[string]any{"to": "ana", "n": 1},
			InsertOpts: runtime.InsertOpts{Queue: "q1", Tags: []string{"x"}, Metadata: map[string]any{"m": 1}}},
		{Kind: "a", InsertOpts: runtime.InsertOpts{Queue: "q1"}},
		{Kind: "b", InsertOpts: runtime.InsertOpts{Queue: "q2", Priority: -3}},
		{Kind: "b", InsertOpts: runtime.InsertOpts{Queue: "q2"}},
		{Kind: "b", InsertOpts: runtime.InsertOpts{Queue: "q2", Tags: []string{"x", "y"}}},
	})
	require.NoError(t, err)
	record("InsertMany", ids, err)
	u, err := runtime.InsertJob(ctx, db, "u", nil, &runtime.InsertOpts{UniqueKey: "k"})
	record("InsertJob", u, err)
	wf, err := runtime.InsertWorkflow(ctx, db, []runtime.WorkflowJob{
		{Name: "fetch", InsertParams: runtime.InsertParams{Kind: "fetch"}},
		{Name: "build", After: []string{"fetch"}, InsertParams: runtime.InsertParams{Kind: "build"}},
		{Name: "ship", After: []string{"build", "fetch"}, InsertParams: runtime.InsertParams{Kind: "ship",
			InsertOpts: runtime.InsertOpts{OnDependencyFailure: runtime.DependencyFailureCancel}}},
	})
	require.NoError(t, err)
	record("InsertWorkflow", wf, err)
	_, err = runtime.InsertWorkflow(ctx, db, []runtime.WorkflowJob{{Name: "x", After: []string{"x"}}})
	record("InsertWorkflow cycle", nil, err)
	batch, parts, err := runtime.InsertBatch(ctx, db, []runtime.InsertParams{{Kind: "part"}, {Kind: "part", Payload: []int{1, 2}}},
		runtime.BatchCallback{Kind: "parts-done", Payload: map[string]string{"for": "ana"}})
	require.NoError(t, err)
	record("InsertBatch", []any{batch, parts}, err)
	open, err := runtime.NewBatch(ctx, db, runtime.BatchCallback{Kind: "late-done", Queue: "q2"})
	require.NoError(t, err)
	late, err := runtime.Insert(ctx, db, "late", nil, &runtime.InsertOpts{Batch: open, Sequence: "seq"})
	record("Insert in batch", late, err)
	seq2, err := runtime.Insert(ctx, db, "late", nil, &runtime.InsertOpts{Sequence: "seq"})
	record("Insert in sequence", seq2, err)
	record("SealBatch", nil, runtime.SealBatch(ctx, db, open))
	record("SealBatch again", nil, runtime.SealBatch(ctx, db, open))
	record("SealBatch missing", nil, runtime.SealBatch(ctx, db, 4242))

	// States no call sets without a worker.
	setup(`UPDATE fila_jobs SET state = 'dead', attempts = 3, max_attempts = 3, started_at = now(), finished_at = now(),
    last_error = 'third', errors = jsonb_build_array(
        jsonb_build_object('attempt', 1, 'at', '2026-01-02T03:04:05.123456+00:00'::timestamptz, 'error', 'first'),
        jsonb_build_object('attempt', 3, 'at', now(), 'error', 'third'))
WHERE id = $1`, ids[0])
	setup(`UPDATE fila_jobs SET state = 'cancelled', finished_at = now() WHERE id = $1`, ids[1])
	setup(`UPDATE fila_jobs SET state = 'running', attempts = 1, started_at = now(), lease_until = now() + interval '1 hour',
    worker = 'w-1' WHERE id = $1`, ids[2])
	setup(`UPDATE fila_jobs SET state = 'running', attempts = 1, started_at = now(), lease_until = now() + interval '1 hour' WHERE id = $1`, wf[0])
	setup(`UPDATE fila_jobs SET state = 'completed', finished_at = now(), output = '{"fetched": [1, 2]}' WHERE id = $1`, wf[0])
	setup(`INSERT INTO fila_jobs (kind, unique_key, state, attempts, started_at, finished_at, last_error)
VALUES ('u', 'k', 'dead', 5, now(), now(), 'gave up')`)

	for _, f := range []runtime.JobFilter{{}, {State: runtime.StateDead}, {State: runtime.StateWaiting}, {Tag: "x"},
		{Metadata: map[string]any{"m": 1}}, {Kind: "b", Limit: 1}, {Queue: "q2", BeforeID: ids[4]}, {State: "nope"}} {
		rows, err := runtime.ListJobs(ctx, db, f)
		record("ListJobs", []any{f, rows}, err)
	}
	for _, id := range append(append([]int64{4242}, ids...), wf...) {
		j, err := runtime.GetJob(ctx, db, id)
		record("GetJob", j, err)
	}
	for _, n := range []int{0, 3, 1000} {
		p, err := runtime.PreviewJob(ctx, db, ids[0], n)
		record("PreviewJob", p, err)
	}
	var payload bytes.Buffer
	n, err := runtime.WriteJobPayload(ctx, db, ids[0], &payload, nil)
	record("WriteJobPayload", []any{n, payload.String()}, err)
	for _, id := range append([]int64{ids[0]}, wf...) {
		d, err := runtime.DependencyOutputs(ctx, db, id)
		record("DependencyOutputs", d, err)
	}
	for _, id := range append(append([]int64{ids[0], late, seq2, 4242}, wf...), parts...) {
		f, err := runtime.GetJobFlow(ctx, db, id)
		record("GetJobFlow", f, err)
	}
	for _, b := range []int64{batch, open, 4242} {
		got, err := runtime.GetBatch(ctx, db, b)
		record("GetBatch", got, err)
	}

	res, err := runtime.Retry(ctx, db, ids[0], u.ID+100, ids[3], 4242)
	record("Retry", res, err)
	var deadU int64 // the dead "u" job written by hand
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM fila_jobs WHERE kind = 'u'`).Scan(&deadU))
	res, err = runtime.Retry(ctx, db, deadU)
	record("Retry held key", res, err)
	res, err = runtime.RetryWhere(ctx, db, runtime.JobFilter{State: runtime.StateCancelled})
	record("RetryWhere", res, err)
	res, err = runtime.RetryWhere(ctx, db, runtime.JobFilter{State: runtime.StatePending})
	record("RetryWhere pending", res, err)
	res, err = runtime.Cancel(ctx, db, ids[2], ids[3], wf[0], 4242)
	record("Cancel", res, err)
	res, err = runtime.CancelWhere(ctx, db, runtime.JobFilter{State: runtime.StatePending, Kind: "b"})
	record("CancelWhere", res, err)
	res, err = runtime.CancelWhere(ctx, db, runtime.JobFilter{State: runtime.StateWaiting, Limit: 1})
	record("CancelWhere waiting", res, err)
	res, err = runtime.Delete(ctx, db, ids[2], ids[4], 4242)
	record("Delete", res, err)
	res, err = runtime.DeleteWhere(ctx, db, runtime.JobFilter{State: runtime.StateDead})
	record("DeleteWhere dead", res, err)
	res, err = runtime.DeleteWhere(ctx, db, runtime.JobFilter{State: runtime.StateCancelled, Queue: "q2"})
	record("DeleteWhere cancelled", res, err)
	res, err = runtime.DeleteWhere(ctx, db, runtime.JobFilter{State: runtime.StateRunning})
	record("DeleteWhere running", res, err)

	record("PauseQueue", nil, runtime.PauseQueue(ctx, db, "q1"))
	paused, err := runtime.PausedQueues(ctx, db)
	record("PausedQueues", paused, err)
	known, err := runtime.KnownQueues(ctx, db)
	record("KnownQueues", known, err)
	inUse, err := runtime.QueueInUse(ctx, db, "q2")
	record("QueueInUse", inUse, err)
	resumed, err := runtime.ResumeQueue(ctx, db, "q1")
	record("ResumeQueue", resumed, err)
	limits, ok, err := runtime.TablePayloadLimits(ctx, db)
	record("TablePayloadLimits", []any{limits, ok}, err)

	minutes, err := runtime.Minutes(ctx, db, time.Hour)
	record("Minutes", minutes, err)
	tasks, err := runtime.RecurringTasks(ctx, db)
	record("RecurringTasks", tasks, err)
	deleted, err := runtime.DeleteRecurringTask(ctx, db, "nightly")
	record("DeleteRecurringTask", deleted, err)
	record("SetNotifyTrigger", nil, runtime.SetNotifyTrigger(ctx, db, true))
	on, err := runtime.NotifyTriggerOn(ctx, db)
	record("NotifyTriggerOn", on, err)

	rows, err := runtime.ListJobs(ctx, db, runtime.JobFilter{})
	record("ListJobs at the end", rows, err)
	return steps
}

// timeText is a time as JSON spells one.
var timeText = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`)

// withoutTimes is steps as JSON, each time in it replaced by the same
// text: two databases given the same calls a moment apart differ in
// nothing else.
func withoutTimes(t *testing.T, steps []step) []string {
	t.Helper()
	out := make([]string, len(steps))
	for i, s := range steps {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		out[i] = timeText.ReplaceAllString(string(b), `"<time>"`)
	}
	return out
}

// Every insert and management function returns through *sql.DB what it
// returns through the pgx pool, on both drivers: the same calls on two
// fresh databases, one through each, return the same results (their times
// aside); and the reads through both on one database return the same,
// times and all.
func TestSQLManagementMatchesPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	viaPgx := newDB(t)
	want := manageScenario(t, viaPgx.Pool, viaPgx.Pool)
	require.Greater(t, len(want), 60)
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			sdb := runtime.SQL(openSQL(t, driver, db))
			got := manageScenario(t, db.Pool, sdb)
			require.Equal(t, withoutTimes(t, want), withoutTimes(t, got))

			// The same database, through pgx and through database/sql.
			for _, f := range []runtime.JobFilter{{}, {State: runtime.StateWaiting}} {
				a, err := runtime.ListJobs(ctx, db.Pool, f)
				require.NoError(t, err)
				b, err := runtime.ListJobs(ctx, sdb, f)
				require.NoError(t, err)
				require.Equal(t, withoutNow(t, a), withoutNow(t, b))
				for _, j := range a {
					x, err := runtime.GetJob(ctx, db.Pool, j.ID)
					require.NoError(t, err)
					y, err := runtime.GetJob(ctx, sdb, j.ID)
					require.NoError(t, err)
					require.NotZero(t, y.Now)
					x.Now = y.Now
					require.Equal(t, x, y)
					p, err := runtime.PreviewJob(ctx, db.Pool, j.ID, 10)
					require.NoError(t, err)
					q, err := runtime.PreviewJob(ctx, sdb, j.ID, 10)
					require.NoError(t, err)
					p.Now = q.Now
					require.Equal(t, p, q)
					fa, err := runtime.GetJobFlow(ctx, db.Pool, j.ID)
					require.NoError(t, err)
					fb, err := runtime.GetJobFlow(ctx, sdb, j.ID)
					require.NoError(t, err)
					require.Equal(t, fa, fb)
					da, err := runtime.DependencyOutputs(ctx, db.Pool, j.ID)
					require.NoError(t, err)
					dbo, err := runtime.DependencyOutputs(ctx, sdb, j.ID)
					require.NoError(t, err)
					require.Equal(t, da, dbo)
				}
			}
		})
	}
}

// withoutNow is rows with the clock of their reading, which differs from
// one read to the next, zeroed.
func withoutNow(t *testing.T, rows []runtime.JobRow) []runtime.JobRow {
	t.Helper()
	out := make([]runtime.JobRow, len(rows))
	for i, r := range rows {
		require.NotZero(t, r.Now)
		r.Now = time.Time{}
		out[i] = r
	}
	return out
}

// Management inside the caller's *sql.Tx commits or rolls back with it:
// a retry (which runs in a savepoint there) and a batch (the batch, its
// jobs and its seal, in a savepoint) leave nothing once it rolls back, and
// the transaction still sees its own changes before.
func TestSQLManagementInCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, driver := range sqlDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDB(t)
			sdb := openSQL(t, driver, db)
			dead := seedJobInState(t, db, "mail", "default", runtime.StateDead)

			tx, err := sdb.BeginTx(ctx, nil)
			require.NoError(t, err)
			res, err := runtime.Retry(ctx, runtime.SQL(tx), dead)
			require.NoError(t, err)
			require.Equal(t, []int64{dead}, res.IDs())
			batch, parts, err := runtime.InsertBatch(ctx, runtime.SQL(tx), []runtime.InsertParams{{Kind: "part"}},
				runtime.BatchCallback{Kind: "parts-done"})
			require.NoError(t, err)
			require.Len(t, parts, 1)
			j, err := runtime.GetJob(ctx, runtime.SQL(tx), dead)
			require.NoError(t, err)
			require.Equal(t, runtime.StatePending, j.State, "the transaction sees its retry")
			b, err := runtime.GetBatch(ctx, runtime.SQL(tx), batch)
			require.NoError(t, err)
			require.True(t, b.Sealed)
			state, _, _ := jobState(t, db, dead)
			require.Equal(t, runtime.StateDead, state, "no one else sees it before the commit")
			require.NoError(t, tx.Rollback())

			state, _, _ = jobState(t, db, dead)
			require.Equal(t, runtime.StateDead, state)
			_, err = runtime.GetBatch(ctx, db.Pool, batch)
			require.ErrorIs(t, err, runtime.ErrBatchNotFound)
			requireNoKind(t, db, "part")
		})
	}
}
