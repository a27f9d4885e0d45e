package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// TestListJobsSeveralValuesTagsAndPayload: several states, kinds and
// queues at once, combined with the single fields; tags any and all; a
// payload containment; and the errors of bad input.
func TestListJobsSeveralValuesTagsAndPayload(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	pending := seedJobInState(t, db, "mail", "default", "pending")
	running := seedJobInState(t, db, "mail", "default", "running")
	completed := seedJobInState(t, db, "resize", "images", "completed")
	dead := seedJobInState(t, db, "resize", "images", "dead")
	cancelled := seedJobInState(t, db, "sms", "texts", "cancelled")

	list := func(f runtime.JobFilter) []int64 {
		t.Helper()
		got, err := runtime.ListJobs(ctx, db.Pool, f)
		require.NoError(t, err, "%+v", f)
		return rowIDs(got)
	}
	require.Equal(t, []int64{cancelled, dead}, list(runtime.JobFilter{States: []string{"dead", "cancelled"}}))
	require.Equal(t, []int64{cancelled, dead, running}, list(runtime.JobFilter{State: "running", States: []string{"dead", "cancelled"}}),
		"State and States together select either")
	require.Equal(t, []int64{cancelled, running, pending}, list(runtime.JobFilter{Kinds: []string{"mail", "sms"}}))
	require.Equal(t, []int64{cancelled, dead, completed}, list(runtime.JobFilter{Queue: "texts", Queues: []string{"images"}}))
	require.Equal(t, []int64{completed}, list(runtime.JobFilter{States: []string{"completed", "pending"}, Queues: []string{"images"}}))

	insert := func(kind string, payload any, tags ...string) int64 {
		id, err := runtime.Insert(ctx, db.Pool, kind, payload, &runtime.InsertOpts{Tags: tags})
		require.NoError(t, err)
		return id
	}
	eu := insert("tagged", map[string]any{"user": 7, "plan": "pro"}, "billing", "eu")
	us := insert("tagged", map[string]any{"user": 8, "plan": "pro", "nested": map[string]any{"a": 1}}, "billing", "us")
	none := insert("tagged", map[string]any{"user": 7})
	require.Equal(t, []int64{us, eu}, list(runtime.JobFilter{TagsAny: []string{"eu", "us"}}))
	require.Equal(t, []int64{eu}, list(runtime.JobFilter{TagsAll: []string{"billing", "eu"}}))
	require.Equal(t, []int64{eu}, list(runtime.JobFilter{Tag: "eu", TagsAll: []string{"billing"}}), "Tag joins TagsAll")
	require.Equal(t, []int64{us}, list(runtime.JobFilter{TagsAll: []string{"billing"}, TagsAny: []string{"us", "asia"}}))
	require.Equal(t, []int64{none, eu}, list(runtime.JobFilter{Payload: `{"user": 7}`}))
	require.Equal(t, []int64{us}, list(runtime.JobFilter{Payload: `{"nested": {"a": 1}}`}))
	require.Equal(t, []int64{eu}, list(runtime.JobFilter{Payload: `{"user": 7}`, Tag: "eu"}))
	require.Empty(t, list(runtime.JobFilter{Payload: `{"user": 9}`}))

	for _, bad := range []struct {
		f    runtime.JobFilter
		want string
	}{
		{runtime.JobFilter{Payload: `{"user": `}, "Payload is not valid JSON"},
		{runtime.JobFilter{States: []string{"dead", "failed"}}, `state "failed" is unknown`},
		{runtime.JobFilter{Queues: []string{"ok", "has space"}}, "queue name"},
		{runtime.JobFilter{TagsAny: []string{""}}, "empty tag"},
		{runtime.JobFilter{OrderBy: "kind"}, `OrderBy "kind" is unknown`},
		{runtime.JobFilter{Cursor: "not-a-cursor"}, "not a cursor"},
		{runtime.JobFilter{BeforeID: 3, Cursor: "x"}, "BeforeID and Cursor both given"},
		{runtime.JobFilter{BeforeID: 3, OrderBy: runtime.OrderRunAt}, "use Cursor"},
	} {
		_, err := runtime.ListJobs(ctx, db.Pool, bad.f)
		require.ErrorContains(t, err, bad.want, "%+v", bad.f)
	}
	// The Where functions change jobs, and refuse what only a listing reads.
	_, err := runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{Kinds: []string{"mail"}})
	require.ErrorContains(t, err, "JobFilter.Kinds is read by ListJobs only")
	_, err = runtime.CancelWhere(ctx, db.Pool, runtime.JobFilter{State: "pending", Payload: `{}`})
	require.ErrorContains(t, err, "JobFilter.Payload is read by ListJobs only")
}

// TestListJobsOrderings: each ordering, both ways, agrees with a sort of
// the rows in Go, and a cursor of one ordering is refused by another.
func TestListJobsOrderings(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	seedOrdered(t, db, 30)
	all, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all, 30)

	for _, order := range runtime.ListOrders() {
		for _, asc := range []bool{false, true} {
			want := slices.Clone(all)
			sort.Slice(want, func(i, k int) bool { return less(order, asc, want[i], want[k]) })
			got, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{OrderBy: order, Ascending: asc, Limit: 1000})
			require.NoError(t, err)
			require.Equal(t, rowIDs(want), rowIDs(got), "%s ascending=%v", order, asc)
		}
	}

	page, err := runtime.ListJobsPage(ctx, db.Pool, runtime.JobFilter{OrderBy: runtime.OrderRunAt, Limit: 5})
	require.NoError(t, err)
	require.NotEmpty(t, page.Next)
	_, err = runtime.ListJobsPage(ctx, db.Pool, runtime.JobFilter{OrderBy: runtime.OrderPriority, Limit: 5, Cursor: page.Next})
	require.True(t, errors.Is(err, runtime.ErrBadCursor), "%v", err)
	require.ErrorContains(t, err, "it continues a listing by run_at descending, and this one is by priority descending")
	_, err = runtime.ListJobsPage(ctx, db.Pool, runtime.JobFilter{OrderBy: runtime.OrderRunAt, Ascending: true, Limit: 5, Cursor: page.Next})
	require.ErrorContains(t, err, "this one is by run_at ascending")
}

// TestListJobsCursorUnderInserts pages through 250 jobs, 40 at a time, in
// every ordering, while jobs are inserted between pages (some of them
// sorting before the current place, some after): every job that was there
// at the start is listed exactly once, and no job twice.
func TestListJobsCursorUnderInserts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	old := seedOrdered(t, db, 250)
	for _, order := range runtime.ListOrders() {
		for _, asc := range []bool{false, true} {
			f := runtime.JobFilter{OrderBy: order, Ascending: asc, Limit: 40}
			seen := map[int64]int{}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100, "paging never ends")
				p, err := runtime.ListJobsPage(ctx, db.Pool, f)
				require.NoError(t, err)
				for _, j := range p.Jobs {
					seen[j.ID]++
				}
				if p.Next == "" {
					break
				}
				seedOrdered(t, db, 7) // between pages
				f.Cursor = p.Next
			}
			for id, n := range seen {
				require.Equal(t, 1, n, "%s ascending=%v: job %d listed %d times", order, asc, id, n)
			}
			for _, id := range old {
				require.Contains(t, seen, id, "%s ascending=%v: job %d was never listed", order, asc, id)
			}
		}
	}
}

// seedOrdered inserts n pending jobs whose priorities, run_at and
// created_at repeat (so the id must break ties) and differ from the id
// order, and returns their ids.
func seedOrdered(t *testing.T, db *testdb.DB, n int) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
INSERT INTO fila_jobs (kind, priority, run_at, created_at)
SELECT 'ordered', (i * 7) % 5, now() + ((i * 13) % 11) * interval '1 minute', now() - ((i * 3) % 4) * interval '1 hour'
FROM generate_series(1, $1::int) i
RETURNING id`, n)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n, fmt.Sprintf("inserted %d", n))
	return ids
}

// less is the listing's order, in Go: the column, then the id, both in the
// direction asked.
func less(order string, asc bool, a, b runtime.JobRow) bool {
	var c int
	switch order {
	case runtime.OrderRunAt:
		c = a.RunAt.Compare(b.RunAt)
	case runtime.OrderCreatedAt:
		c = a.CreatedAt.Compare(b.CreatedAt)
	case runtime.OrderPriority:
		c = int(a.Priority) - int(b.Priority)
	}
	if c == 0 {
		c = int(a.ID - b.ID)
	}
	if asc {
		return c < 0
	}
	return c > 0
}
