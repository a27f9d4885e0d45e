package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/claimer"
	"github.com/fila-run/fila/internal/riverimport"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// The tests of `fila import river` (internal/riverimport) against River's
// real schema, built by River's own migrator, with jobs that River's own
// client inserted and worked into every state. They live here because this
// module already depends on River; Fila's own does not.

// probeArgs is a River job whose worker does what Mode says.
type probeArgs struct {
	Mode string `json:"mode"`
	N    int    `json:"n"`
}

func (probeArgs) Kind() string { return "import_probe" }

// otherArgs is a second kind, never worked by River.
type otherArgs struct {
	Note string `json:"note"`
}

func (otherArgs) Kind() string { return "import_other" }

type probeWorker struct {
	river.WorkerDefaults[probeArgs]
	started chan int64    // a "block" job's id, once running
	release chan struct{} // closed to let "block" jobs finish
}

func (w *probeWorker) Work(ctx context.Context, job *river.Job[probeArgs]) error {
	switch job.Args.Mode {
	case "fail", "discard":
		return fmt.Errorf("probe %d failed", job.Args.N)
	case "cancel":
		return river.JobCancel(errors.New("probe cancelled"))
	case "panic":
		panic("probe panicked")
	case "block":
		w.started <- job.ID
		select {
		case <-w.release:
		case <-ctx.Done():
		}
	}
	return nil
}

// laterRetry puts a failed job an hour ahead, so that River does not run it
// again while the test looks at it.
type laterRetry struct{}

func (laterRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Hour) }

// migrateRiver builds River's tables with River's own migrator, in schema
// (created first) or, when it is "", in the search_path.
func migrateRiver(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := context.Background()
	if schema != "" {
		_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: riverLogger(), Schema: schema})
	require.NoError(t, err)
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
}

// riverStates reads River's jobs by id.
func riverJobs(t *testing.T, pool *pgxpool.Pool, schema string) map[int64]*rivertype.JobRow {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: riverLogger(), Schema: schema})
	require.NoError(t, err)
	res, err := client.JobList(context.Background(), river.NewJobListParams().First(10000).States(
		rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted, rivertype.JobStateDiscarded,
		rivertype.JobStatePending, rivertype.JobStateRetryable, rivertype.JobStateRunning, rivertype.JobStateScheduled))
	require.NoError(t, err)
	jobs := map[int64]*rivertype.JobRow{}
	for _, j := range res.Jobs {
		jobs[j.ID] = j
	}
	return jobs
}

// filaJobsByRiverID reads every Fila job by the River id it carries.
func filaJobsByRiverID(t *testing.T, pool *pgxpool.Pool) map[int64]*runtime.JobRow {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT id, (metadata->>'`+riverimport.MetadataKey+`')::bigint FROM fila_jobs ORDER BY id`)
	require.NoError(t, err)
	type pair struct{ id, river int64 }
	pairs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pair, error) {
		var p pair
		return p, r.Scan(&p.id, &p.river)
	})
	require.NoError(t, err)
	out := map[int64]*runtime.JobRow{}
	for _, p := range pairs {
		j, err := runtime.GetJob(ctx, pool, p.id)
		require.NoError(t, err)
		_, dup := out[p.river]
		require.False(t, dup, "River job %d imported twice", p.river)
		out[p.river] = j
	}
	return out
}

func TestImportRiverJobsOfEveryState(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	const schema = "river_app" // River in a schema of its own, Fila in public
	migrateRiver(t, db.Pool, schema)

	workers := river.NewWorkers()
	w := &probeWorker{started: make(chan int64, 1), release: make(chan struct{})}
	require.NoError(t, river.AddWorkerSafely(workers, w))
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Logger:      riverLogger(),
		Queues:      map[string]river.QueueConfig{"work": {MaxWorkers: 4}},
		RetryPolicy: laterRetry{},
		Schema:      schema,
		// import_other has no River worker: it is inserted, never worked.
		SkipUnknownJobCheck: true,
		Workers:             workers,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(w.release) }) }
	t.Cleanup(func() {
		release()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})

	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	md := func(s string) []byte { return []byte(s) }
	params := []river.InsertManyParams{
		{Args: probeArgs{Mode: "ok", N: 1}, InsertOpts: &river.InsertOpts{Queue: "work", Tags: []string{"billing", "eu-west"}, Metadata: md(`{"team":"payments"}`), Priority: 2}},
		{Args: probeArgs{Mode: "ok", N: 2}, InsertOpts: &river.InsertOpts{Queue: "work"}},
		{Args: probeArgs{Mode: "fail", N: 3}, InsertOpts: &river.InsertOpts{Queue: "work", MaxAttempts: 3, Tags: []string{"retry"}}},
		{Args: probeArgs{Mode: "panic", N: 4}, InsertOpts: &river.InsertOpts{Queue: "work", MaxAttempts: 5, Priority: 3}},
		{Args: probeArgs{Mode: "discard", N: 5}, InsertOpts: &river.InsertOpts{Queue: "work", MaxAttempts: 1}},
		{Args: probeArgs{Mode: "cancel", N: 6}, InsertOpts: &river.InsertOpts{Queue: "work"}},
		{Args: probeArgs{Mode: "block", N: 7}, InsertOpts: &river.InsertOpts{Queue: "work", MaxAttempts: 2}},
		{Args: probeArgs{Mode: "ok", N: 8}, InsertOpts: &river.InsertOpts{Queue: "work", ScheduledAt: later, Priority: 4, Metadata: md(`{"source":"cron"}`)}},
		// Queue "idle" has no River workers: its jobs stay available.
		{Args: probeArgs{Mode: "ok", N: 9}, InsertOpts: &river.InsertOpts{Queue: "idle", Priority: 3, Tags: []string{"idle"}}},
		{Args: otherArgs{Note: "héllo \"quoted\""}, InsertOpts: &river.InsertOpts{Queue: "idle", MaxAttempts: 7}},
		{Args: otherArgs{Note: "waits"}, InsertOpts: &river.InsertOpts{Queue: "idle", Pending: true}},
	}
	inserted, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	require.Len(t, inserted, len(params))

	wantRiver := map[int]rivertype.JobState{ // by N (otherArgs by position)
		1: rivertype.JobStateCompleted, 2: rivertype.JobStateCompleted, 3: rivertype.JobStateRetryable,
		4: rivertype.JobStateRetryable, 5: rivertype.JobStateDiscarded, 6: rivertype.JobStateCancelled,
		7: rivertype.JobStateRunning, 8: rivertype.JobStateScheduled, 9: rivertype.JobStateAvailable,
		10: rivertype.JobStateAvailable, 11: rivertype.JobStatePending,
	}
	select {
	case <-w.started:
	case <-time.After(30 * time.Second):
		t.Fatal("River did not start the blocking job within 30s")
	}
	testrt.WaitFor(t, 30*time.Second, "River's jobs in every state", func() bool {
		jobs := riverJobs(t, db.Pool, schema)
		for i, ins := range inserted {
			if j := jobs[ins.Job.ID]; j == nil || j.State != wantRiver[i+1] {
				return false
			}
		}
		return true
	})
	river0 := riverJobs(t, db.Pool, schema)

	// River's workers are still running a job: refused.
	_, err = riverimport.Import(ctx, db.Pool, riverimport.Config{Schema: schema})
	require.ErrorIs(t, err, riverimport.ErrRunning)
	require.ErrorContains(t, err, "--include-running")

	cfg := riverimport.Config{Schema: schema, BatchSize: 3, IncludeRunning: true, IncludeFinished: true, Logger: zaptest.NewLogger(t)}

	// A dry run counts and writes nothing.
	dry := cfg
	dry.DryRun = true
	rep, err := riverimport.Import(ctx, db.Pool, dry)
	require.NoError(t, err)
	require.True(t, rep.DryRun)
	require.Equal(t, []riverimport.Count{
		{State: "available", Kind: "import_other", To: "pending", Jobs: 1},
		{State: "available", Kind: "import_probe", To: "pending", Jobs: 1},
		{State: "cancelled", Kind: "import_probe", To: "cancelled", Jobs: 1},
		{State: "completed", Kind: "import_probe", To: "completed", Jobs: 2},
		{State: "discarded", Kind: "import_probe", To: "dead", Jobs: 1},
		{State: "retryable", Kind: "import_probe", To: "pending", Jobs: 2},
		{State: "running", Kind: "import_probe", To: "pending", Jobs: 1},
		{State: "scheduled", Kind: "import_probe", To: "pending", Jobs: 1},
	}, rep.Moved)
	require.Equal(t, []riverimport.Left{{State: "pending", Jobs: 1, Reason: rep.Left[0].Reason}}, rep.Left)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n, "a dry run wrote jobs")

	rep, err = riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 10, rep.MovedTotal())
	require.Equal(t, 4, rep.Batches) // 10 jobs, 3 a batch
	require.Zero(t, rep.Deleted)

	imported := filaJobsByRiverID(t, db.Pool)
	require.Len(t, imported, 10)
	var lastFila int64
	for i, ins := range inserted {
		r := river0[ins.Job.ID]
		f := imported[r.ID]
		if r.State == rivertype.JobStatePending {
			require.Nil(t, f, "a River job pending (River Pro's) moved")
			continue
		}
		require.NotNil(t, f, "River job %d (%s) not imported", r.ID, r.State)
		require.Greater(t, f.ID, lastFila, "Fila's ids keep River's order")
		lastFila = f.ID
		what := fmt.Sprintf("job %d (River %d, %s)", i+1, r.ID, r.State)
		require.Equal(t, r.Queue, f.Queue, what)
		require.Equal(t, r.Kind, f.Kind, what)
		require.JSONEq(t, string(r.EncodedArgs), string(f.Payload), what)
		require.EqualValues(t, r.Priority-1, f.Priority, what)
		require.Equal(t, r.MaxAttempts, f.MaxAttempts, what)
		require.True(t, r.CreatedAt.Equal(f.CreatedAt), what)
		require.Equal(t, r.Tags, emptyIfNil(f.Tags), what)

		var meta map[string]any
		require.NoError(t, json.Unmarshal(f.Metadata, &meta), what)
		var riverMeta map[string]any
		require.NoError(t, json.Unmarshal(r.Metadata, &riverMeta), what)
		riverMeta[riverimport.MetadataKey] = float64(r.ID)
		require.Equal(t, riverMeta, meta, what)

		switch r.State {
		case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable:
			require.Equal(t, "pending", f.State, what)
			require.True(t, r.ScheduledAt.Equal(f.RunAt), "%s: run_at %s, River's scheduled_at %s", what, f.RunAt, r.ScheduledAt)
			require.Equal(t, r.Attempt, f.Attempts, what)
		case rivertype.JobStateRunning:
			require.Equal(t, "pending", f.State, what)
			require.Equal(t, r.Attempt, f.Attempts, "%s: the interrupted attempt counts", what)
			require.WithinDuration(t, f.Now, f.RunAt, time.Minute, "%s: due now", what)
		case rivertype.JobStateCompleted:
			require.Equal(t, "completed", f.State, what)
		case rivertype.JobStateCancelled:
			require.Equal(t, "cancelled", f.State, what)
		case rivertype.JobStateDiscarded:
			require.Equal(t, "dead", f.State, what)
		}
		if r.FinalizedAt != nil {
			require.NotNil(t, f.FinishedAt, what)
			require.True(t, r.FinalizedAt.Equal(*f.FinishedAt), what)
		} else {
			require.Nil(t, f.FinishedAt, what)
		}
		if r.AttemptedAt != nil {
			require.NotNil(t, f.StartedAt, what)
			require.True(t, r.AttemptedAt.Equal(*f.StartedAt), what)
		}

		wantErrs := len(r.Errors)
		if r.State == rivertype.JobStateRunning {
			wantErrs++ // the interrupted attempt
		}
		require.Len(t, f.Errors, wantErrs, what)
		for k, e := range r.Errors {
			require.Equal(t, e.Attempt, f.Errors[k].Attempt, what)
			require.True(t, e.At.Equal(f.Errors[k].At), what)
			want := e.Error
			if e.Trace != "" {
				want += "\n" + e.Trace
			}
			require.Equal(t, claimer.StorableText(want, claimer.ErrorTextMax), f.Errors[k].Error, what)
		}
		if wantErrs > 0 {
			require.Equal(t, f.Errors[wantErrs-1].Error, f.LastError, what)
		} else {
			require.Empty(t, f.LastError, what)
		}
	}
	// What River wrote, seen through the mapping: its error texts and the
	// panic's trace.
	require.Equal(t, "probe 3 failed", imported[inserted[2].Job.ID].LastError)
	require.Contains(t, imported[inserted[3].Job.ID].LastError, "probe panicked")
	require.Contains(t, imported[inserted[3].Job.ID].LastError, "(*probeWorker).Work", "the panic's trace follows its error")
	require.Contains(t, imported[inserted[6].Job.ID].LastError, "interrupted")

	// Idempotent: a second run moves nothing, and leaves every job as it was.
	rep, err = riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.EqualValues(t, 10, rep.AlreadyImported)
	again := filaJobsByRiverID(t, db.Pool)
	require.Len(t, again, 10)
	for id, j := range imported {
		was, is := *j, *again[id]
		was.Now, is.Now = time.Time{}, time.Time{} // when each was read
		require.Equal(t, was, is, "River job %d changed by the second run", id)
	}
	var recorded int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_river_imports").Scan(&recorded))
	require.Equal(t, 10, recorded)

	// Imported jobs deleted from fila_jobs (retention deletes completed
	// ones) are still known as moved: River's rows do not move again.
	_, err = db.Pool.Exec(ctx, "DELETE FROM fila_jobs WHERE state = 'completed'")
	require.NoError(t, err)
	rep, err = riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.EqualValues(t, 10, rep.AlreadyImported)
	imported = filaJobsByRiverID(t, db.Pool)
	require.Len(t, imported, 8)

	// River stops (its blocked job finishes in River), then --delete on the
	// same database removes what moved, and moves nothing again.
	release()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(sctx))
	del := cfg
	del.Delete = true
	rep, err = riverimport.Import(ctx, db.Pool, del)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.EqualValues(t, 10, rep.Deleted)
	left := riverJobs(t, db.Pool, schema)
	require.Len(t, left, 1, "only the pending job stays in River")

	// A real Fila runtime runs the imported pending jobs: the scheduled and
	// retryable ones are brought due first (River put them an hour ahead).
	_, err = db.Pool.Exec(ctx, "UPDATE fila_jobs SET run_at = now() WHERE state = 'pending'")
	require.NoError(t, err)
	type run struct {
		attempt int
		payload string
	}
	var mu sync.Mutex
	runs := map[int64]run{}
	handler := func(_ context.Context, job *runtime.Job) error {
		mu.Lock()
		defer mu.Unlock()
		runs[job.ID] = run{job.Attempt, string(job.Payload)}
		return nil
	}
	testrt.Start(t, runtime.Config{
		DSN:    db.DSN,
		Queues: []string{"work", "idle"},
		Kinds:  []runtime.Kind{{Name: "import_probe", Handler: handler}, {Name: "import_other", Handler: handler}},
		Logger: zaptest.NewLogger(t),
	})
	var pending []*runtime.JobRow
	for _, j := range imported {
		if j.State == "pending" {
			pending = append(pending, j)
		}
	}
	require.Len(t, pending, 6)
	testrt.WaitFor(t, 30*time.Second, "Fila completes the imported pending jobs", func() bool {
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs WHERE state <> 'completed' AND state IN ('pending', 'running')").Scan(&left))
		return left == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, j := range pending {
		r, ok := runs[j.ID]
		require.True(t, ok, "Fila job %d not run", j.ID)
		require.Equal(t, j.Attempts+1, r.attempt, "job %d: the attempts River made count", j.ID)
		require.JSONEq(t, string(j.Payload), r.payload)
	}
}

// From another database, with --delete: each batch is deleted from River
// after it commits in Fila.
func TestImportRiverFromAnotherDatabaseAndDelete(t *testing.T) {
	ctx := context.Background()
	fila := testdb.New(t)
	_, err := migrations.Migrate(ctx, fila.Pool)
	require.NoError(t, err)
	other := testdb.New(t)
	migrateRiver(t, other.Pool, "")
	client, err := river.NewClient(riverpgxv5.New(other.Pool), &river.Config{Logger: riverLogger()})
	require.NoError(t, err)
	params := make([]river.InsertManyParams, 50)
	for i := range params {
		params[i] = river.InsertManyParams{Args: otherArgs{Note: strconv.Itoa(i)}}
	}
	n, err := client.InsertManyFast(ctx, params)
	require.NoError(t, err)
	require.Equal(t, 50, n)

	cfg := riverimport.Config{River: other.Pool, BatchSize: 7, Delete: true, Logger: zaptest.NewLogger(t)}
	rep, err := riverimport.Import(ctx, fila.Pool, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 50, rep.MovedTotal())
	require.EqualValues(t, 50, rep.Deleted)
	require.Equal(t, 8, rep.Batches)
	var left int
	require.NoError(t, other.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&left))
	require.Zero(t, left)

	jobs := filaJobsByRiverID(t, fila.Pool)
	require.Len(t, jobs, 50)
	notes := map[string]bool{}
	for _, j := range jobs {
		var a otherArgs
		require.NoError(t, json.Unmarshal(j.Payload, &a))
		notes[a.Note] = true
		require.Equal(t, "default", j.Queue)
		require.Equal(t, "pending", j.State)
		require.Equal(t, 25, j.MaxAttempts, "River's default")
		require.EqualValues(t, 0, j.Priority, "River's default priority 1 is Fila's 0")
	}
	require.Len(t, notes, 50)

	rep, err = riverimport.Import(ctx, fila.Pool, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.Zero(t, rep.Batches)
}

// TestImportRiverBench moves FILA_IMPORT_BENCH River jobs (inserted by
// River's InsertManyFast) and logs the time it took:
//
//	cd bench/peers && FILA_IMPORT_BENCH=100000 go test -run TestImportRiverBench -v -timeout 30m .
func TestImportRiverBench(t *testing.T) {
	size := os.Getenv("FILA_IMPORT_BENCH")
	if size == "" {
		t.Skip("set FILA_IMPORT_BENCH=N to import N River jobs and time it")
	}
	total, err := strconv.Atoi(size)
	require.NoError(t, err, "FILA_IMPORT_BENCH")
	ctx := context.Background()
	db := testdb.New(t)
	_, err = migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	migrateRiver(t, db.Pool, "")
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: riverLogger()})
	require.NoError(t, err)
	for done := 0; done < total; {
		chunk := min(10000, total-done)
		params := make([]river.InsertManyParams, chunk)
		for i := range params {
			params[i] = river.InsertManyParams{Args: probeArgs{Mode: "ok", N: done + i},
				InsertOpts: &river.InsertOpts{Tags: []string{"bench"}, Metadata: []byte(`{"origin":"bench"}`)}}
		}
		n, err := client.InsertManyFast(ctx, params)
		require.NoError(t, err)
		done += n
	}
	_, err = db.Pool.Exec(ctx, "VACUUM ANALYZE river_job")
	require.NoError(t, err)

	start := time.Now()
	rep, err := riverimport.Import(ctx, db.Pool, riverimport.Config{})
	took := time.Since(start)
	require.NoError(t, err)
	require.EqualValues(t, total, rep.MovedTotal())
	t.Logf("imported %d River jobs in %s: %.0f jobs/s (%d batches of %d)", total, took.Round(time.Millisecond),
		float64(total)/took.Seconds(), rep.Batches, riverimport.BatchSizeDefault)

	start = time.Now()
	rep, err = riverimport.Import(ctx, db.Pool, riverimport.Config{})
	require.NoError(t, err)
	require.EqualValues(t, total, rep.AlreadyImported)
	t.Logf("a second run found all %d imported in %s", total, time.Since(start).Round(time.Millisecond))
}

func emptyIfNil(s []string) []string {
	if len(s) == 0 {
		return []string{}
	}
	return s
}
