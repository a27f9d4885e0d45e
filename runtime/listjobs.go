package runtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/channel"
)

// What a listing may be sorted by (JobFilter.OrderBy). Each sorts by the
// id after the column, so that the order is total and a cursor names one
// place in it.
const (
	OrderID        = "id"
	OrderRunAt     = "run_at"
	OrderCreatedAt = "created_at"
	OrderPriority  = "priority"
)

// ListOrders returns what JobFilter.OrderBy may be.
func ListOrders() []string { return []string{OrderID, OrderRunAt, OrderCreatedAt, OrderPriority} }

// ErrBadCursor is wrapped by ListJobsPage's error when JobFilter.Cursor is
// not one it returned, or was returned for another ordering.
var ErrBadCursor = errors.New("bad cursor")

// JobPage is one page of a listing.
type JobPage struct {
	Jobs []JobRow `json:"jobs"`
	// Next is the cursor of the next page (JobFilter.Cursor); "" when this
	// page was not full, and so the last.
	Next string `json:"next,omitempty"`
}

// listSelect is the listing's statement without its conditions and order:
// the WHERE conditions are joined in by listQuery, each state written as a
// constant (see stateCondition) so that the planner can use the state's
// partial index, every other value a parameter.
//
// Which index serves a listing depends on the states asked for: pending
// rows come from fila_jobs_pending_idx or fila_jobs_scheduled_idx, running
// ones from fila_jobs_lease_idx, dead ones from fila_jobs_dead_idx,
// cancelled ones from fila_jobs_cancelled_idx, all partial indexes on their
// state. Completed rows, and a listing of every state, ordered by id walk
// the primary key from the end the order starts at: most rows qualify, and
// the cursor's id < $n is a range of it. Other orderings sort the rows the
// filter selects: no index orders the whole table by run_at, created_at or
// priority. No index leads with kind or queue across states: a filter on
// them alone that few rows match reads the whole table, so give a state
// along with them where the table is large.
const listSelect = `SELECT ` + boundedColumns + `
FROM fila_jobs
WHERE `

// smallStates are the states whose rows are few beside the history: a
// listing of them reads the states' partial indexes and sorts what it
// finds (ordering by id + 0, which no index provides, so the planner does
// not walk the primary key instead, past every other row, to reach a page
// of them).
var smallStates = []string{StateRunning, StateDead, StateCancelled, StateScheduled, StateRetrying}

// listCursor is what a cursor holds: the ordering it was made for, and the
// last job of its page (that job's value of the ordering column, as text
// PostgreSQL reads back exactly, and its id).
type listCursor struct {
	Order string `json:"o"`
	Asc   bool   `json:"a,omitempty"`
	Value string `json:"v,omitempty"`
	ID    int64  `json:"id"`
}

func orderName(order string, asc bool) string {
	if asc {
		return order + " ascending"
	}
	return order + " descending"
}

func encodeCursor(c listCursor) string {
	b, _ := json.Marshal(c) // a struct of strings and numbers always encodes
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.ID < 1 || !slices.Contains(ListOrders(), c.Order) {
		return c, fmt.Errorf("%w: %q is not a cursor a listing returned", ErrBadCursor, s)
	}
	return c, nil
}

// cursorValue is job j's value of the ordering column, as its cursor keeps
// it: timestamps to the microsecond, as the table stores them.
func cursorValue(order string, j JobRow) string {
	switch order {
	case OrderRunAt:
		return j.RunAt.UTC().Format(time.RFC3339Nano)
	case OrderCreatedAt:
		return j.CreatedAt.UTC().Format(time.RFC3339Nano)
	case OrderPriority:
		return strconv.Itoa(int(j.Priority))
	}
	return ""
}

// listQuery builds a listing's statement: conditions joined with AND, $n
// the parameters in args.
type listQuery struct {
	conds []string
	args  []any
}

func (q *listQuery) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// union is one and many together, without repeats.
func union(one string, many []string) []string {
	var out []string
	for _, v := range append([]string{one}, many...) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// listStatement checks f and returns the statement ListJobsPage runs, its
// parameters, and the limit.
func listStatement(f JobFilter) (string, []any, int, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 1 || limit > ListLimitMax:
		return "", nil, 0, fmt.Errorf("Limit %d out of range: allowed 1 to %d", f.Limit, ListLimitMax)
	}
	order := f.OrderBy
	if order == "" {
		order = OrderID
	}
	if !slices.Contains(ListOrders(), order) {
		return "", nil, 0, fmt.Errorf("OrderBy %q is unknown: use %s", f.OrderBy, strings.Join(ListOrders(), ", "))
	}
	switch {
	case f.BeforeID < 0:
		return "", nil, 0, fmt.Errorf("BeforeID %d is negative", f.BeforeID)
	case f.BeforeID > 0 && f.Cursor != "":
		return "", nil, 0, errors.New("BeforeID and Cursor both given: give the Cursor alone")
	case f.BeforeID > 0 && (order != OrderID || f.Ascending):
		return "", nil, 0, fmt.Errorf("BeforeID pages a listing of the newest first, not one by %s: use Cursor", orderName(order, f.Ascending))
	}
	var q listQuery

	states := union(f.State, f.States)
	var stateConds []string
	for _, s := range states {
		if err := checkJobState(s); err != nil {
			return "", nil, 0, err
		}
		stateConds = append(stateConds, stateCondition(s, ""))
	}
	if len(stateConds) > 0 {
		q.conds = append(q.conds, "("+strings.Join(stateConds, " OR ")+")")
	}
	if kinds := union(f.Kind, f.Kinds); len(kinds) > 0 {
		q.conds = append(q.conds, "kind = ANY ("+q.arg(kinds)+"::text[])")
	}
	if queues := union(f.Queue, f.Queues); len(queues) > 0 {
		for _, qn := range queues {
			if err := channel.ValidateQueue(qn); err != nil {
				return "", nil, 0, err
			}
		}
		q.conds = append(q.conds, "queue = ANY ("+q.arg(queues)+"::text[])")
	}
	if slices.Contains(f.TagsAll, "") || slices.Contains(f.TagsAny, "") {
		return "", nil, 0, errors.New("an empty tag in TagsAll or TagsAny: no job has one; leave it out")
	}
	if all := union(f.Tag, f.TagsAll); len(all) > 0 {
		q.conds = append(q.conds, "tags @> "+q.arg(all)+"::text[]")
	}
	if anyOf := union("", f.TagsAny); len(anyOf) > 0 {
		q.conds = append(q.conds, "tags && "+q.arg(anyOf)+"::text[]")
	}
	if f.Metadata != nil {
		b, err := json.Marshal(f.Metadata)
		if err != nil {
			return "", nil, 0, fmt.Errorf("Metadata: %w", err)
		}
		q.conds = append(q.conds, "metadata @> "+q.arg(string(b))+"::text::jsonb")
	}
	if f.Payload != "" {
		if !json.Valid([]byte(f.Payload)) {
			return "", nil, 0, fmt.Errorf("Payload is not valid JSON: %.80q", f.Payload)
		}
		q.conds = append(q.conds, "payload @> "+q.arg(f.Payload)+"::text::jsonb")
	}

	switch {
	case f.WorkflowID < 0:
		return "", nil, 0, fmt.Errorf("WorkflowID %d is not a workflow id", f.WorkflowID)
	case f.WorkflowID > 0:
		q.conds = append(q.conds, "workflow_id = "+q.arg(f.WorkflowID)+"::bigint")
	}

	dir, cmp := "DESC", "<"
	if f.Ascending {
		dir, cmp = "ASC", ">"
	}
	if f.BeforeID > 0 {
		q.conds = append(q.conds, "id < "+q.arg(f.BeforeID)+"::bigint")
	}
	if f.Cursor != "" {
		c, err := decodeCursor(f.Cursor)
		if err != nil {
			return "", nil, 0, err
		}
		if c.Order != order || c.Asc != f.Ascending {
			return "", nil, 0, fmt.Errorf("%w: it continues a listing by %s, and this one is by %s: list again from the start",
				ErrBadCursor, orderName(c.Order, c.Asc), orderName(order, f.Ascending))
		}
		if order == OrderID {
			q.conds = append(q.conds, "id "+cmp+" "+q.arg(c.ID)+"::bigint")
		} else {
			typ := map[string]string{OrderRunAt: "timestamptz", OrderCreatedAt: "timestamptz", OrderPriority: "smallint"}[order]
			q.conds = append(q.conds, fmt.Sprintf("(%s, id) %s (%s::text::%s, %s::bigint)", order, cmp, q.arg(c.Value), typ, q.arg(c.ID)))
		}
	}

	idOrder := "id"
	if len(states) > 0 && !slices.ContainsFunc(states, func(s string) bool { return !slices.Contains(smallStates, s) }) {
		idOrder = "id + 0"
	}
	if f.WorkflowID > 0 {
		// A workflow's jobs are few: read them by fila_jobs_workflow_idx
		// and sort them, rather than walk the primary key to reach them.
		idOrder = "id + 0"
	}
	orderBy := idOrder + " " + dir
	if order != OrderID {
		orderBy = order + " " + dir + ", id " + dir
	}
	where := "true"
	if len(q.conds) > 0 {
		where = strings.Join(q.conds, "\n  AND ")
	}
	sql := listSelect + where + "\nORDER BY " + orderBy + "\nLIMIT " + q.arg(limit) + "::int"
	return sql, q.args, limit, nil
}

// ListJobs returns the jobs f selects, at most f.Limit of them, in f's
// order (the newest, highest id, first by default). Payload and Errors are
// left empty: GetJob reads them. ListJobsPage also returns the cursor of
// the next page.
func ListJobs(ctx context.Context, db DB, f JobFilter) ([]JobRow, error) {
	p, err := ListJobsPage(ctx, db, f)
	return p.Jobs, err
}

// ListJobsPage returns a page of the jobs f selects, as ListJobs does, and
// the cursor of the next page: pass it back as f.Cursor, with the same
// filter, ordering and limit.
func ListJobsPage(ctx context.Context, db DB, f JobFilter) (JobPage, error) {
	sql, args, limit, err := listStatement(f)
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobRow, error) {
		var j JobRow
		err := row.Scan(jobRowFields(&j)...)
		return j, err
	})
	if err != nil {
		return JobPage{}, fmt.Errorf("list jobs: %w", err)
	}
	if jobs == nil {
		jobs = []JobRow{}
	}
	page := JobPage{Jobs: jobs}
	if len(jobs) == limit {
		order := f.OrderBy
		if order == "" {
			order = OrderID
		}
		last := jobs[len(jobs)-1]
		page.Next = encodeCursor(listCursor{Order: order, Asc: f.Ascending, Value: cursorValue(order, last), ID: last.ID})
	}
	return page, nil
}

// listOnly names the first field of f that only ListJobs reads, "" when
// none is set: the Where functions refuse them rather than change more
// jobs than were meant.
func listOnly(f JobFilter) string {
	switch {
	case len(f.States) > 0:
		return "States"
	case len(f.Kinds) > 0:
		return "Kinds"
	case len(f.Queues) > 0:
		return "Queues"
	case len(f.TagsAny) > 0:
		return "TagsAny"
	case len(f.TagsAll) > 0:
		return "TagsAll"
	case f.Payload != "":
		return "Payload"
	case f.OrderBy != "" || f.Ascending:
		return "OrderBy"
	case f.Cursor != "":
		return "Cursor"
	case f.WorkflowID != 0:
		return "WorkflowID"
	}
	return ""
}
