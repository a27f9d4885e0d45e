package runtime_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// notifications listens on a queue's channel on a connection of its own and
// returns the payloads (job ids) it receives.
func notifications(t *testing.T, db *testdb.DB, queue string) <-chan int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{"fila_" + queue}.Sanitize())
	require.NoError(t, err)
	out := make(chan int64, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			id, _ := strconv.ParseInt(n.Payload, 10, 64)
			out <- id
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	})
	return out
}

func nextNotification(t *testing.T, ch <-chan int64, what string) int64 {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(20 * time.Second):
		t.Fatalf("no notification within 20s: %s", what)
		return 0
	}
}

// A held job is never claimed by a running runtime, and its insert wakes
// nobody; released, it is announced and runs at once (the safety poll is a
// minute away).
func TestHeldJobRunsOnlyOnceReleased(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	ran := make(chan int64, 10)
	cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error { ran <- j.ID; return nil }})
	cfg.SafetyPoll = time.Minute
	start(t, cfg)
	waitFor(t, 20*time.Second, "the worker asleep, so inserts notify", func() bool {
		var asleep bool
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM fila_sleepers WHERE queue = 'default')").Scan(&asleep))
		return asleep
	})
	notes := notifications(t, db, "default")

	held, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)
	s, _, _ := jobState(t, db, held)
	require.Equal(t, runtime.StateHeld, s)
	// A marker after it: once the marker ran, the worker had every chance
	// to claim the held job.
	marker, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	require.Equal(t, marker, nextNotification(t, notes, "the marker's"), "the held insert sent no notification")
	select {
	case id := <-ran:
		require.Equal(t, marker, id, "only the marker runs")
	case <-time.After(20 * time.Second):
		t.Fatal("marker not run")
	}
	waitFor(t, 10*time.Second, "marker completed", func() bool { s, _, _ := jobState(t, db, marker); return s == "completed" })
	s, attempts, _ := jobState(t, db, held)
	require.Equal(t, runtime.StateHeld, s)
	require.Zero(t, attempts)

	// Held jobs show in listings and in the queue's counts.
	page, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{State: runtime.StateHeld})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, held, page[0].ID)
	qs, err := runtime.ListQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, int64(1), qs[0].Held)

	released := time.Now()
	res, err := runtime.Release(ctx, db.Pool, held)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: held, From: runtime.StateHeld}}, res.Changed)
	require.Empty(t, res.Skipped)
	require.Equal(t, held, nextNotification(t, notes, "the release's"))
	select {
	case id := <-ran:
		require.Equal(t, held, id)
		require.Less(t, time.Since(released), 20*time.Second, "well before the safety poll (1 min)")
	case <-time.After(20 * time.Second):
		t.Fatal("released job not run")
	}
	waitFor(t, 10*time.Second, "released job completed", func() bool { s, _, _ := jobState(t, db, held); return s == "completed" })
}

func TestReleaseSkipsUnknownAndNotHeldJobs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	pending, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	held, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)

	res, err := runtime.Release(ctx, db.Pool, held+100, pending, held, held)
	require.NoError(t, err)
	require.Equal(t, []int64{held}, res.IDs())
	require.Len(t, res.Skipped, 2)
	require.Equal(t, pending, res.Skipped[0].ID)
	require.Equal(t, runtime.StatePending, res.Skipped[0].State)
	require.Contains(t, res.Skipped[0].Reason, "is pending, not held")
	require.Equal(t, held+100, res.Skipped[1].ID)
	require.Contains(t, res.Skipped[1].Reason, "does not exist")
	require.ErrorContains(t, res.Err(), "not held")

	// Released already: a second release says so.
	res, err = runtime.Release(ctx, db.Pool, held)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	require.Contains(t, res.Skipped[0].Reason, "is pending, not held")

	res, err = runtime.Release(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	require.Empty(t, res.Skipped)
}

// A held job inserted in a transaction exists only if it commits; a release
// in a transaction lets it go only if that commits.
func TestHeldInsertAndReleaseInTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	client := runtime.NewClient(db.Pool)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = runtime.InsertTx(ctx, tx, "k", nil, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, countState(t, db, runtime.StateHeld))

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	id, err := runtime.InsertTx(ctx, tx, "k", nil, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	s, _, _ := jobState(t, db, id)
	require.Equal(t, runtime.StateHeld, s)

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := client.ReleaseTx(ctx, tx, id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, res.IDs())
	require.NoError(t, tx.Rollback(ctx))
	s, _, _ = jobState(t, db, id)
	require.Equal(t, runtime.StateHeld, s, "a rolled back release lets nothing go")

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = client.ReleaseTx(ctx, tx, id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	s, _, _ = jobState(t, db, id)
	require.Equal(t, runtime.StatePending, s)
}

// Every insert path writes held jobs held: one statement, many in one
// statement, and COPY.
func TestHeldInsertManyPaths(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	_, err := runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{
		{Kind: "k"}, {Kind: "k", InsertOpts: runtime.InsertOpts{Held: true, RunAt: future}}})
	require.NoError(t, err)
	require.Equal(t, 1, countState(t, db, runtime.StateHeld))
	require.Equal(t, 1, countState(t, db, runtime.StatePending))

	many := make([]runtime.InsertParams, runtime.InsertManyCopyMin)
	for i := range many {
		many[i] = runtime.InsertParams{Kind: "k", InsertOpts: runtime.InsertOpts{Held: i%2 == 0}}
	}
	ids, err := runtime.InsertMany(ctx, db.Pool, many)
	require.NoError(t, err)
	require.Equal(t, 1+runtime.InsertManyCopyMin/2, countState(t, db, runtime.StateHeld))
	s, _, _ := jobState(t, db, ids[0])
	require.Equal(t, runtime.StateHeld, s)
	s, _, _ = jobState(t, db, ids[1])
	require.Equal(t, runtime.StatePending, s)

	// A released job keeps its RunAt.
	var scheduled int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT id FROM fila_jobs WHERE state = 'held' AND run_at > now()").Scan(&scheduled))
	res, err := runtime.Release(ctx, db.Pool, scheduled)
	require.NoError(t, err)
	require.Len(t, res.Changed, 1)
	require.NotNil(t, res.Changed[0].RunsAt)
	require.WithinDuration(t, future, *res.Changed[0].RunsAt, time.Second)
}

func TestHeldRefusesUniqueKeyAndFlows(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Held: true, UniqueKey: "u"})
	require.ErrorContains(t, err, "a held job cannot have a UniqueKey")
	first, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	_, err = runtime.Insert(ctx, db.Pool, "k", nil, &runtime.InsertOpts{Held: true, After: []int64{first}})
	require.ErrorContains(t, err, "a held job cannot have After")
	_, err = runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{
		{Kind: "k", InsertOpts: runtime.InsertOpts{Held: true}},
		{Kind: "k", InsertOpts: runtime.InsertOpts{After: []int64{first}}}})
	require.ErrorContains(t, err, "job 0: Held")
	require.Zero(t, countState(t, db, runtime.StateHeld))
}
