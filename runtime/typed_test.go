package runtime_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// sendWelcome is a typed job: its type names its kind and its defaults.
type sendWelcome struct {
	Email string `json:"email"`
	Tries int    `json:"tries,omitempty"`
}

func (sendWelcome) Kind() string { return "send-welcome" }

func (sendWelcome) InsertOpts() runtime.InsertOpts {
	return runtime.InsertOpts{Queue: "mail", Priority: 3, MaxAttempts: 2}
}

// A typed handler receives the payload decoded, whoever inserted it: the
// typed API, with the type's defaults and a per-insert override, or a
// plain SQL INSERT of the same JSON. A payload that does not decode is dead
// at once, saying why.
func TestTypedJobsRoundTrip(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	got := map[int64]sendWelcome{}
	cfg := baseConfig(t, db, runtime.Work(func(ctx context.Context, j *runtime.Job, a sendWelcome) error {
		mu.Lock()
		got[j.ID] = a
		mu.Unlock()
		return nil
	}))
	cfg.Queues = []string{"mail"}
	start(t, cfg)

	typed, err := runtime.InsertArgs(ctx, db.Pool, sendWelcome{Email: "ana@example.com"}, nil)
	require.NoError(t, err)
	over, err := runtime.InsertArgs(ctx, db.Pool, sendWelcome{Email: "bo@example.com"}, &runtime.InsertOpts{MaxAttempts: 7})
	require.NoError(t, err)
	ids, err := runtime.InsertManyArgs(ctx, db.Pool, []runtime.ArgsParams{{Args: sendWelcome{Email: "cy@example.com", Tries: 2}}})
	require.NoError(t, err)
	var bySQL, broken int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, queue, payload) VALUES ('send-welcome', 'mail', '{"email": "di@example.com"}') RETURNING id`).Scan(&bySQL))
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, queue, payload) VALUES ('send-welcome', 'mail', '{"email": 42}') RETURNING id`).Scan(&broken))

	waitFor(t, 10*time.Second, "every job finished", func() bool {
		return countState(t, db, "completed") == 4 && countState(t, db, "dead") == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, sendWelcome{Email: "ana@example.com"}, got[typed.ID])
	require.Equal(t, sendWelcome{Email: "cy@example.com", Tries: 2}, got[ids[0]])
	require.Equal(t, sendWelcome{Email: "di@example.com"}, got[bySQL])
	var queue string
	var prio, maxAttempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, priority, max_attempts FROM fila_jobs WHERE id = $1::bigint`, typed.ID).Scan(&queue, &prio, &maxAttempts))
	require.Equal(t, "mail", queue)
	require.Equal(t, 3, prio, "the type's default")
	require.Equal(t, 2, maxAttempts, "the type's default")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max_attempts FROM fila_jobs WHERE id = $1::bigint`, over.ID).Scan(&maxAttempts))
	require.Equal(t, 7, maxAttempts, "the insert's own option wins")
	_, attempts, lastErr := jobState(t, db, broken)
	require.Equal(t, 1, attempts, "a payload that does not decode is not retried")
	require.Contains(t, lastErr, `kind "send-welcome"`)
	require.Contains(t, lastErr, "runtime_test.sendWelcome")
}

// Middleware runs around every handler, the first outermost, and sees the
// outcome; a kind's Backoff sets its retry delay.
func TestMiddlewareOrderAndKindBackoff(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var trace []string
	record := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
	layer := func(name string) runtime.Middleware {
		return func(next runtime.Handler) runtime.Handler {
			return func(ctx context.Context, j *runtime.Job) error {
				record(name + " before")
				err := next(context.WithValue(ctx, ctxKey(name), true), j)
				record(name + " after: " + errText(err))
				return err
			}
		}
	}
	var starts []time.Time
	k := runtime.Kind{Name: "k", Handler: func(ctx context.Context, j *runtime.Job) error {
		_, outer := ctx.Value(ctxKey("outer")).(bool)
		_, inner := ctx.Value(ctxKey("inner")).(bool)
		record("handler sees outer=" + boolText(outer) + " inner=" + boolText(inner))
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		if j.Attempt == 1 {
			return errors.New("first try fails")
		}
		return nil
	}, Backoff: func(attempt int) time.Duration { return 300 * time.Millisecond }}
	cfg := baseConfig(t, db, k)
	cfg.Middleware = []runtime.Middleware{layer("outer"), layer("inner")}
	start(t, cfg)
	id, err := runtime.Insert(ctx, db.Pool, "k", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "completed", func() bool { s, _, _ := jobState(t, db, id); return s == "completed" })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"outer before", "inner before", "handler sees outer=true inner=true", "inner after: first try fails", "outer after: first try fails",
		"outer before", "inner before", "handler sees outer=true inner=true", "inner after: nil", "outer after: nil",
	}, trace)
	require.GreaterOrEqual(t, starts[1].Sub(starts[0]), 300*time.Millisecond, "the kind's backoff, not the runtime's 20 ms")
}

type ctxKey string

func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// Every field of InsertOpts set on the insert overrides the type's.
func TestInsertArgsOverridesEveryField(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	over := runtime.InsertOpts{}
	v := reflect.ValueOf(&over).Elem()
	for i := range v.NumField() {
		switch v.Type().Field(i).Name {
		case "After", "OnDependencyFailure", "Sequence", "SequenceOnDead", "Batch", "Held":
			// Flows and held jobs refuse a UniqueKey: set below, on inserts
			// of their own.
			continue
		}
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("override-" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int16:
			f.SetInt(9)
		case reflect.Int64: // a time.Duration
			f.SetInt(int64(9 * time.Second))
		case reflect.Pointer:
			switch f.Interface().(type) {
			case *runtime.RetryPolicy:
				f.Set(reflect.ValueOf(&runtime.RetryPolicy{Base: 9 * time.Second, Max: 9 * time.Second}))
			default:
				t.Fatalf("InsertOpts.%s: a field this test does not know how to set", v.Type().Field(i).Name)
			}
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"pending"}))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]any{"from": "insert"}))
		case reflect.Struct:
			switch f.Interface().(type) {
			case time.Time:
				f.Set(reflect.ValueOf(time.Now().Add(time.Hour)))
			case runtime.PayloadLimits:
				f.Set(reflect.ValueOf(runtime.PayloadLimits{MaxBytes: 4096, MaxDepth: 8}))
			default:
				t.Fatalf("InsertOpts.%s: a field this test does not know how to set", v.Type().Field(i).Name)
			}
		default:
			t.Fatalf("InsertOpts.%s: a field this test does not know how to set", v.Type().Field(i).Name)
		}
	}
	over.Queue = "other"
	res, err := runtime.InsertArgs(ctx, db.Pool, sendWelcome{Email: "x@example.com"}, &over)
	require.NoError(t, err)
	var queue, key, metadata, policy string
	var prio, maxAttempts int
	var states, tags []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue, priority, max_attempts, unique_key, unique_states, tags, metadata::text,
		policy::text
		FROM fila_jobs WHERE id = $1::bigint`, res.ID).
		Scan(&queue, &prio, &maxAttempts, &key, &states, &tags, &metadata, &policy))
	require.Equal(t, []string{"pending"}, tags)
	require.JSONEq(t, `{"from": "insert"}`, metadata)
	require.JSONEq(t, `{"timeout_ms": 9000, "retry_base_ms": 9000, "retry_max_ms": 9000}`, policy)
	require.Equal(t, "other", queue)
	require.Equal(t, 9, prio)
	require.Equal(t, 9, maxAttempts)
	require.Equal(t, "override-UniqueKey", key)
	require.Equal(t, []string{"pending"}, states)

	first, err := runtime.Insert(ctx, db.Pool, "send-welcome", nil, nil)
	require.NoError(t, err)
	flows := runtime.InsertOpts{After: []int64{first}, OnDependencyFailure: runtime.DependencyFailureRun,
		Sequence: "s", SequenceOnDead: runtime.SequenceDeadContinue}
	res, err = runtime.InsertArgs(ctx, db.Pool, sendWelcome{Email: "y@example.com"}, &flows)
	require.NoError(t, err)
	var after []int64
	var onFailure, seq, onDead string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT depends_on, dependency_failure, sequence_key, sequence_on_dead
		FROM fila_jobs WHERE id = $1::bigint`, res.ID).Scan(&after, &onFailure, &seq, &onDead))
	require.Equal(t, []int64{first}, after)
	require.Equal(t, []string{"run", "s", "continue"}, []string{onFailure, seq, onDead})

	res, err = runtime.InsertArgs(ctx, db.Pool, sendWelcome{Email: "z@example.com"}, &runtime.InsertOpts{Held: true})
	require.NoError(t, err)
	st, _, _ := jobState(t, db, res.ID)
	require.Equal(t, "held", st, "Held set on the insert holds the typed job")
}
