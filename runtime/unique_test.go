package runtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func TestUniqueJobs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	opts := &runtime.InsertOpts{UniqueKey: "invoice-42"}
	first, err := runtime.InsertJob(ctx, db.Pool, "bill", map[string]int{"invoice": 42}, opts)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := runtime.InsertJob(ctx, db.Pool, "bill", map[string]int{"invoice": 42}, opts)
	require.NoError(t, err, "a duplicate is no error")
	require.True(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, "pending", again.DuplicateState)
	id, err := runtime.Insert(ctx, db.Pool, "bill", nil, opts)
	require.NoError(t, err)
	require.Equal(t, first.ID, id, "Insert returns the existing job's id")
	// Another kind with the same key is another job.
	other, err := runtime.InsertJob(ctx, db.Pool, "remind", nil, opts)
	require.NoError(t, err)
	require.False(t, other.Duplicate)

	// A plain SQL producer is held to it too.
	tag, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, unique_key) VALUES ('bill', 'invoice-42')
		ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL AND state = ANY (coalesce(unique_states, '{pending,running}'::text[]))
		DO NOTHING`)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, unique_key) VALUES ('bill', 'invoice-42')`)
	require.ErrorContains(t, err, "fila_jobs_unique_idx", "without ON CONFLICT the index refuses it by name")

	// Once the job completed, the key is free again (default states).
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE id = $1::bigint`, first.ID)
	require.NoError(t, err)
	next, err := runtime.InsertJob(ctx, db.Pool, "bill", nil, opts)
	require.NoError(t, err)
	require.False(t, next.Duplicate)
	require.NotEqual(t, first.ID, next.ID)

	// Unique while completed too: a second run of a completed job is refused.
	once := &runtime.InsertOpts{UniqueKey: "once", UniqueStates: []string{"pending", "running", "completed"}}
	a, err := runtime.InsertJob(ctx, db.Pool, "k", nil, once)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE id = $1::bigint`, a.ID)
	require.NoError(t, err)
	b, err := runtime.InsertJob(ctx, db.Pool, "k", nil, once)
	require.NoError(t, err)
	require.True(t, b.Duplicate)
	require.Equal(t, "completed", b.DuplicateState)

	for _, bad := range []runtime.InsertOpts{
		{UniqueStates: []string{"pending"}},
		{UniqueKey: "x", UniqueStates: []string{"running"}},
		{UniqueKey: "x", UniqueStates: []string{"pending", "sleeping"}},
	} {
		_, err := runtime.InsertJob(ctx, db.Pool, "k", nil, &bad)
		require.Error(t, err, "%+v", bad)
	}
}

// Twenty concurrent inserts of one unique job leave one row, and every
// caller learns its id.
func TestUniqueJobConcurrentInserts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]int64, 20)
	errs := make([]error, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			res, err := runtime.InsertJob(ctx, tx, "k", nil, &runtime.InsertOpts{UniqueKey: "same"})
			if err == nil {
				err = tx.Commit(ctx)
			} else {
				_ = tx.Rollback(ctx)
			}
			ids[i], errs[i] = res.ID, err
		}()
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE unique_key = 'same'`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestInsertManyWithUniqueKeys(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	ids, err := runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{
		{Kind: "k", InsertOpts: runtime.InsertOpts{UniqueKey: "a"}},
		{Kind: "k"},
		{Kind: "k", InsertOpts: runtime.InsertOpts{UniqueKey: "a"}},
		{Kind: "k", InsertOpts: runtime.InsertOpts{UniqueKey: "b"}},
	})
	require.NoError(t, err)
	require.Len(t, ids, 4)
	require.Equal(t, ids[0], ids[2], "the duplicate within the batch returns the first's id")
	require.NotEqual(t, ids[0], ids[3])
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&n))
	require.Equal(t, 3, n)
}
