package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// report is a typed job whose type declares every default of its kind.
type report struct {
	Name string `json:"name"`
}

func (report) Kind() string { return "report" }

func (r report) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "reports", Priority: 4, MaxAttempts: 2, UniqueKey: "report-" + r.Name,
		Timeout: 150 * time.Millisecond, Retry: &runtime.RetryPolicy{Base: time.Hour, Max: time.Hour}}
}

// plain is a typed job that declares nothing: its kind's worker policy
// (Kind.Timeout, Kind.Backoff) applies.
type plain struct{}

func (plain) Kind() string { return "plain" }

// Every default a kind declares — queue, priority, max attempts,
// uniqueness on its type; timeout and retry backoff on its type or on its
// Kind — holds in the database, and every one is overridden by the
// insert's own option.
func TestKindPolicyDefaultsAndOverrides(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	block := func(ctx context.Context, _ *runtime.Job) error { <-ctx.Done(); return ctx.Err() }
	reportKind := runtime.Work(func(ctx context.Context, j *runtime.Job, _ report) error { return block(ctx, j) })
	plainKind := runtime.Work(func(ctx context.Context, j *runtime.Job, _ plain) error { return block(ctx, j) })
	plainKind.Timeout = 250 * time.Millisecond
	plainKind.Backoff = func(int) time.Duration { return 30 * time.Minute }
	cfg := baseConfig(t, db, reportKind, plainKind)
	cfg.Queues = []string{"reports", "other", "default"}
	start(t, cfg)
	c := runtime.NewClient(db.Pool)

	def, err := c.Insert(ctx, report{Name: "a"}, nil)
	require.NoError(t, err)
	dup, err := c.Insert(ctx, report{Name: "a"}, nil)
	require.NoError(t, err)
	require.True(t, dup.Duplicate, "the type's unique key")
	require.Equal(t, def.ID, dup.ID)
	over, err := c.Insert(ctx, report{Name: "a"}, &runtime.InsertOpts{Queue: "other", Priority: 1, MaxAttempts: 3,
		UniqueKey: "report-a-again", Timeout: 350 * time.Millisecond, Retry: &runtime.RetryPolicy{Base: 10 * time.Second, Max: 10 * time.Second}})
	require.NoError(t, err)
	require.False(t, over.Duplicate, "the insert's own unique key")
	plainDef, err := c.Insert(ctx, plain{}, nil)
	require.NoError(t, err)
	plainOver, err := c.Insert(ctx, plain{}, &runtime.InsertOpts{Timeout: 100 * time.Millisecond,
		Retry: &runtime.RetryPolicy{Base: 2 * time.Minute, Max: 2 * time.Minute}})
	require.NoError(t, err)

	// Each attempt times out and is retried, once, far ahead: its backoff.
	for _, id := range []int64{def.ID, over.ID, plainDef.ID, plainOver.ID} {
		waitFor(t, 15*time.Second, "the first attempt failed", func() bool { _, a, le := jobState(t, db, id); return a == 1 && le != "" })
	}
	type row struct {
		queue, key, lastErr string
		prio, maxAttempts   int
		backoff             time.Duration
	}
	read := func(id int64) row {
		var r row
		var key *string
		var backoffMs float64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, unique_key, last_error, priority, max_attempts,
			extract(epoch FROM run_at - failed_at) * 1000
			FROM (SELECT *, (SELECT max((e->>'at')::timestamptz) FROM jsonb_array_elements(errors) e) AS failed_at FROM fila_jobs) j
			WHERE id = $1::bigint`, id).Scan(&r.queue, &key, &r.lastErr, &r.prio, &r.maxAttempts, &backoffMs))
		if key != nil {
			r.key = *key
		}
		r.backoff = time.Duration(backoffMs * float64(time.Millisecond))
		return r
	}
	between := func(d, lo, hi time.Duration) bool { return d >= lo-time.Second && d <= hi+time.Second }

	r := read(def.ID)
	require.Equal(t, "reports", r.queue)
	require.Equal(t, 4, r.prio)
	require.Equal(t, 2, r.maxAttempts)
	require.Equal(t, "report-a", r.key)
	require.Contains(t, r.lastErr, "timed out after 150ms", "the type's timeout")
	require.True(t, between(r.backoff, 30*time.Minute, time.Hour), "the type's retry policy: %s", r.backoff)

	r = read(over.ID)
	require.Equal(t, "other", r.queue)
	require.Equal(t, 1, r.prio)
	require.Equal(t, 3, r.maxAttempts)
	require.Equal(t, "report-a-again", r.key)
	require.Contains(t, r.lastErr, "timed out after 350ms", "the insert's timeout")
	require.True(t, between(r.backoff, 5*time.Second, 10*time.Second), "the insert's retry policy: %s", r.backoff)

	r = read(plainDef.ID)
	require.Equal(t, "default", r.queue)
	require.Equal(t, 5, r.maxAttempts)
	require.Contains(t, r.lastErr, "timed out after 250ms", "the kind's timeout")
	require.True(t, between(r.backoff, 30*time.Minute, 30*time.Minute), "the kind's backoff: %s", r.backoff)

	r = read(plainOver.ID)
	require.Contains(t, r.lastErr, "timed out after 100ms", "the insert's timeout over the kind's")
	require.True(t, between(r.backoff, time.Minute, 2*time.Minute), "the insert's retry policy over the kind's: %s", r.backoff)

	// The job's own policy is in its policy column, not its metadata, and
	// a plain SQL insert can write it too.
	var md *string
	var policy string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT metadata::text, policy::text FROM fila_jobs WHERE id = $1::bigint`, over.ID).Scan(&md, &policy))
	require.Nil(t, md, "no metadata of its own")
	require.JSONEq(t, `{"timeout_ms": 350, "retry_base_ms": 10000, "retry_max_ms": 10000}`, policy)
	got, err := runtime.GetJob(ctx, db.Pool, over.ID)
	require.NoError(t, err)
	require.JSONEq(t, policy, string(got.Policy), "GetJob shows the policy")
	require.Nil(t, got.Metadata)
	got, err = runtime.GetJob(ctx, db.Pool, plainDef.ID)
	require.NoError(t, err)
	require.Nil(t, got.Policy, "a job without a policy of its own")
	var bySQL int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, policy) VALUES ('plain', '{"timeout_ms": 120}') RETURNING id`).Scan(&bySQL))
	// A job inserted the way versions before the policy column did (a
	// worker or producer of such a version during a rolling upgrade, or a
	// plain SQL insert written for one) keeps its policy.
	var legacy int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, metadata) VALUES ('plain', '{"fila": {"timeout_ms": 130}}') RETURNING id`).Scan(&legacy))

	// The metadata key "fila" is the user's now: kept as given, with the
	// job's own policy beside it, and not taken for a policy when it is
	// not shaped as one.
	userKey, err := c.Insert(ctx, plain{}, &runtime.InsertOpts{Metadata: map[string]any{"fila": map[string]any{"team": "ops"}, "x": 1},
		Timeout: 110 * time.Millisecond})
	require.NoError(t, err)
	userOnly, err := c.Insert(ctx, plain{}, &runtime.InsertOpts{Metadata: map[string]any{"fila": map[string]any{"team": "ops"}}})
	require.NoError(t, err)
	for _, id := range []int64{bySQL, legacy, userKey.ID, userOnly.ID} {
		waitFor(t, 15*time.Second, "the attempt failed", func() bool { _, a, le := jobState(t, db, id); return a == 1 && le != "" })
	}
	require.Contains(t, read(bySQL).lastErr, "timed out after 120ms")
	require.Contains(t, read(legacy).lastErr, "timed out after 130ms", "the policy an older version wrote into the metadata")
	require.Contains(t, read(userKey.ID).lastErr, "timed out after 110ms")
	require.Contains(t, read(userOnly.ID).lastErr, "timed out after 250ms", "the kind's timeout: the user's key is no policy")
	got, err = runtime.GetJob(ctx, db.Pool, userKey.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"fila": {"team": "ops"}, "x": 1}`, string(got.Metadata))
	require.JSONEq(t, `{"timeout_ms": 110}`, string(got.Policy))
	got, err = runtime.GetJob(ctx, db.Pool, legacy)
	require.NoError(t, err)
	require.JSONEq(t, `{"timeout_ms": 130}`, string(got.Policy), "GetJob shows the policy the worker reads")
	listed, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Metadata: map[string]any{"fila": map[string]any{"team": "ops"}}})
	require.NoError(t, err)
	require.Len(t, listed, 2, "the user's key filters like any other")
	listed, err = runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{Metadata: map[string]any{"fila": map[string]any{"timeout_ms": 350}}})
	require.NoError(t, err)
	require.Empty(t, listed, "the policy is not metadata")

	_, err = c.Insert(ctx, plain{}, &runtime.InsertOpts{Retry: &runtime.RetryPolicy{Base: time.Minute, Max: time.Second}})
	require.ErrorContains(t, err, "retry policy")
	_, err = c.Insert(ctx, plain{}, &runtime.InsertOpts{Timeout: -time.Second})
	require.ErrorContains(t, err, "timeout -1s is negative")
}

// Insert middleware runs around every insert of a Client, the first
// outermost, for Insert, InsertTx and InsertMany alike; what it adds to
// the metadata is stored with the job and reaches the handler, and it sees
// the ids the insert returned.
func TestInsertMiddlewareOrderAndMetadata(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var trace []string
	record := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
	layer := func(name string) runtime.InsertMiddleware {
		return func(next runtime.InsertFunc) runtime.InsertFunc {
			return func(ctx context.Context, jobs []*runtime.InsertParams) ([]runtime.Inserted, error) {
				record(name + " before " + jobs[0].Kind)
				for _, j := range jobs {
					md := map[string]any{name: true}
					for k, v := range j.Metadata {
						md[k] = v
					}
					j.Metadata = md
				}
				res, err := next(ctx, jobs)
				record(name + " after " + errText(err))
				if err == nil && (len(res) != len(jobs) || res[0].ID == 0) {
					record("no ids")
				}
				return res, err
			}
		}
	}
	seen := make(chan json.RawMessage, 10)
	cfg := baseConfig(t, db, runtime.Work(func(ctx context.Context, j *runtime.Job, _ sendWelcome) error {
		seen <- j.Metadata
		return nil
	}))
	cfg.Queues = []string{"mail"}
	start(t, cfg)
	c := runtime.NewClient(db.Pool, layer("outer"), layer("inner"))

	_, err := c.Insert(ctx, sendWelcome{Email: "a@example.com"}, &runtime.InsertOpts{Metadata: map[string]any{"mine": 1}})
	require.NoError(t, err)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, sendWelcome{Email: "b@example.com"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	many, err := c.InsertMany(ctx, []runtime.ArgsParams{{Args: sendWelcome{Email: "c@example.com"}}, {Args: sendWelcome{Email: "d@example.com"}}})
	require.NoError(t, err)
	require.Len(t, many, 2)
	_, err = c.Insert(ctx, sendWelcome{}, &runtime.InsertOpts{Queue: "no such queue!"})
	require.Error(t, err)

	for range 3 {
		select {
		case md := <-seen:
			var m map[string]any
			require.NoError(t, json.Unmarshal(md, &m))
			require.Equal(t, true, m["outer"])
			require.Equal(t, true, m["inner"])
		case <-time.After(15 * time.Second):
			t.Fatal("a job did not run")
		}
	}
	waitFor(t, 15*time.Second, "three completed", func() bool { return countState(t, db, "completed") == 3 })
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&n))
	require.Equal(t, 3, n, "the rolled-back insert left nothing")
	mu.Lock()
	defer mu.Unlock()
	want := []string{}
	for range 3 {
		want = append(want, "outer before send-welcome", "inner before send-welcome", "inner after nil", "outer after nil")
	}
	require.Equal(t, want, trace[:12])
	require.Len(t, trace, 16)
	require.True(t, strings.HasPrefix(trace[14], "inner after insert: ") || strings.HasPrefix(trace[14], "inner after "), trace[14])
	require.Contains(t, trace[14], "queue", "the middleware sees the insert's error")
}

// A snooze on the last attempt neither spends it nor kills the job, and
// keeps the errors of the attempts before; a RetryAfter around a
// Permanent error is dead at once; a typed handler snoozes like any other.
func TestSnoozeAndRetryAfterAgainstMaxAttempts(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	snoozes := map[int64]int{}
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "last", Handler: func(ctx context.Context, j *runtime.Job) error {
			if j.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			mu.Lock()
			defer mu.Unlock()
			if snoozes[j.ID] < 3 {
				snoozes[j.ID]++
				return runtime.Snooze(50 * time.Millisecond)
			}
			return nil
		}},
		runtime.Kind{Name: "perm", Handler: func(ctx context.Context, j *runtime.Job) error {
			return runtime.RetryAfter(runtime.Permanent(errors.New("gone for good")), time.Millisecond)
		}},
		runtime.Work(func(ctx context.Context, j *runtime.Job, a sendWelcome) error {
			mu.Lock()
			defer mu.Unlock()
			if snoozes[j.ID] < 2 {
				snoozes[j.ID]++
				return runtime.Snooze(0)
			}
			return nil
		}),
	)
	cfg.Queues = []string{"default", "mail"}
	start(t, cfg)
	last, err := runtime.Insert(ctx, db.Pool, "last", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	perm, err := runtime.Insert(ctx, db.Pool, "perm", nil, &runtime.InsertOpts{MaxAttempts: 5})
	require.NoError(t, err)
	typed, err := runtime.NewClient(db.Pool).Insert(ctx, sendWelcome{Email: "e@example.com"}, &runtime.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	for _, id := range []int64{last, typed.ID} {
		waitFor(t, 15*time.Second, "completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	}
	waitFor(t, 15*time.Second, "dead", func() bool { s, _, _ := jobState(t, db, perm); return s == "dead" })
	errorsOf := func(id int64) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT jsonb_array_length(errors) FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&n))
		return n
	}
	_, attempts, lastErr := jobState(t, db, last)
	require.Equal(t, 2, attempts, "three snoozes on the last attempt spent none")
	require.Equal(t, "first attempt fails", lastErr)
	require.Equal(t, 1, errorsOf(last))
	_, attempts, lastErr = jobState(t, db, perm)
	require.Equal(t, 1, attempts)
	require.Equal(t, "gone for good", lastErr)
	_, attempts, _ = jobState(t, db, typed.ID)
	require.Equal(t, 1, attempts)
	require.Zero(t, errorsOf(typed.ID))
	mu.Lock()
	require.Equal(t, 3, snoozes[last])
	require.Equal(t, 2, snoozes[typed.ID])
	mu.Unlock()
}

var _ = testdb.New
