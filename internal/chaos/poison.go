package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fila-run/fila/runtime"
)

// Poison feeds a runtime bad input while good jobs trickle in: handlers
// that panic, time out, ignore their context past their timeout, or fail
// with an error text PostgreSQL cannot store (NUL, invalid UTF-8); payloads
// that are not JSON objects, inserted with plain SQL; a kind no worker
// handles; and enqueues that cannot be accepted (invalid JSON, a queue name
// that cannot be a channel). Each poison job must end dead with a last_error
// that says why (the job of a kind no worker handles is left alone, pending,
// for a worker that knows it), each refused enqueue must fail with an error
// naming the problem and leave nothing behind, and the good jobs must keep
// flowing meanwhile.
func Poison(ctx context.Context, env *Env, size Size) (*Result, error) {
	const timeout = 200 * time.Millisecond
	res := &Result{Load: "15 bad jobs, 5 bad enqueues; 1 good job / 50 ms"}
	db, err := env.newDatabase(ctx, "poison")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	log := newRunLog()
	tr := newTrickle()
	decode := func(ctx context.Context, j *runtime.Job) error {
		var p struct{ N int }
		return j.Decode(&p)
	}
	kinds := []runtime.Kind{
		{Name: "good", Handler: func(ctx context.Context, j *runtime.Job) error {
			tr.pick(j.ID)
			i := log.begin(j.ID, j.Attempt, 0)
			log.end(i, true)
			return nil
		}},
		{Name: "panics", Handler: func(ctx context.Context, j *runtime.Job) error { panic("poison: nil map") }},
		{Name: "too-slow", Timeout: timeout, Handler: func(ctx context.Context, j *runtime.Job) error {
			select {
			case <-time.After(time.Minute):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}},
		{Name: "ignores-cancel", Timeout: timeout, Handler: func(ctx context.Context, j *runtime.Job) error {
			time.Sleep(5 * timeout) // does its work, deaf to ctx
			return ctx.Err()
		}},
		{Name: "decodes", Handler: decode},
		{Name: "unstorable-error", Handler: func(ctx context.Context, j *runtime.Job) error {
			return errors.New("bad \x00 \xff\xfe end") // NUL and invalid UTF-8
		}},
	}
	lr, err := startRuntime(ctx, runtime.Config{
		DSN: db.dsn, ListenDSN: db.direct, Kinds: kinds, Concurrency: 4, Lease: 2 * time.Second,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		SafetyPoll: 10 * time.Minute,
		Logger:     env.logger().Named("poison"),
	})
	if err != nil {
		return nil, err
	}
	defer lr.stop(10 * time.Second)
	tr.start(db.pool, "good", 50*time.Millisecond)
	defer tr.stop()
	start := time.Now()

	// Poison jobs, with plain SQL as any client may insert.
	type poison struct {
		kind, payload string
		maxAttempts   int
		want          string // in last_error; "" for a job that completes
		untouched     bool   // no worker handles the kind: the job must stay pending, never tried
	}
	poisons := []poison{
		{"panics", `{}`, 2, "handler panicked: poison: nil map", false},
		{"too-slow", `{}`, 1, "timed out after " + timeout.String(), false},
		{"ignores-cancel", `{}`, 1, "timed out after " + timeout.String(), false},
		{"decodes", `[1, 2]`, 3, "does not decode", false},
		{"decodes", `"text"`, 3, "does not decode", false},
		{"decodes", `42`, 3, "does not decode", false},
		{"decodes", `true`, 3, "does not decode", false},
		{"decodes", `null`, 3, "is null", false},
		{"decodes", `{"N": "not a number"}`, 3, "does not decode", false},
		{"nobody-handles-this", `{}`, 2, "", true},
		{"unstorable-error", `{}`, 2, "bad \u2400 \uFFFD end", false},
		{"unstorable-error", `{}`, 1, "bad \u2400 \uFFFD end", false},
		{"panics", `{"big": "` + strings.Repeat("x", 100000) + `"}`, 1, "handler panicked", false},
		{"decodes", `{"N": 1, "deep": ` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `}`, 1, "", false},
		{"panics", `{}`, 1, "handler panicked", false},
	}
	ids := make([]int64, len(poisons))
	for i, p := range poisons {
		if err := db.pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, payload, max_attempts) VALUES ($1::text, $2::text::jsonb, $3::int) RETURNING id`,
			p.kind, p.payload, p.maxAttempts).Scan(&ids[i]); err != nil {
			return nil, fmt.Errorf("insert poison %s %.30s: %w", p.kind, p.payload, err)
		}
	}

	// Enqueues that must be refused, each with an error naming the problem.
	refusals := []struct {
		what string
		do   func() error
		want string
	}{
		{"runtime.Insert with invalid JSON", func() error {
			_, err := runtime.Insert(ctx, db.pool, "good", []byte(`{"oops":`), nil)
			return err
		}, "not valid JSON"},
		{"runtime.Insert into queue \"has space\"", func() error {
			_, err := runtime.Insert(ctx, db.pool, "good", nil, &runtime.InsertOpts{Queue: "has space"})
			return err
		}, "queue name"},
		{"runtime.Insert into a 60-byte queue", func() error {
			_, err := runtime.Insert(ctx, db.pool, "good", nil, &runtime.InsertOpts{Queue: strings.Repeat("q", 60)})
			return err
		}, "fit in a channel name"},
		{"plain SQL into queue \"has space\"", func() error {
			_, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, queue) VALUES ('good', 'has space')`)
			return err
		}, "fila_jobs_queue_valid"},
		{"plain SQL with a NULL payload", func() error {
			_, err := db.pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('good', NULL)`)
			return err
		}, "payload"},
	}
	for _, r := range refusals {
		err := r.do()
		res.check(err != nil && strings.Contains(err.Error(), r.want), "%s: got error %v, want one naming %q", r.what, err, r.want)
	}
	_, err = runtime.New(runtime.Config{DSN: db.dsn, Queues: []string{"has space"}, Kinds: kinds})
	res.check(err != nil && strings.Contains(err.Error(), "Queues"), "a runtime on queue \"has space\": got %v", err)

	// Every poison job ends dead, saying why.
	var states map[int64]jobRow
	settled := waitFor(ctx, 60*time.Second, func() bool {
		states, err = jobStates(ctx, db)
		if err != nil {
			return false
		}
		for i, id := range ids {
			if s := states[id].state; s != runtime.StateDead && s != runtime.StateCompleted && !poisons[i].untouched {
				return false
			}
		}
		return true
	})
	res.check(settled, "poison jobs were still pending or running after 60s")
	poisonedAt := time.Since(start)
	var dead int
	for i, p := range poisons {
		s := states[ids[i]]
		if p.untouched {
			res.check(s.state == runtime.StatePending && s.attempts == 0,
				"job %d of kind %s, which no worker handles, ended %s after %d attempts; want pending, never tried",
				ids[i], p.kind, s.state, s.attempts)
			continue
		}
		if p.want == "" { // a valid payload: it just works
			res.check(s.state == runtime.StateCompleted, "job %d (%s, deeply nested payload) ended %s: %s", ids[i], p.kind, s.state, s.lastError)
			continue
		}
		if s.state == runtime.StateDead && strings.Contains(s.lastError, p.want) {
			dead++
		} else {
			res.Lost++
			res.check(false, "poison job %d (%s, payload %.20s) ended %s after %d attempts with last_error %q; want dead with %q",
				ids[i], p.kind, p.payload, s.state, s.attempts, firstLine(s.lastError), p.want)
		}
	}
	// The good jobs kept flowing.
	n, picked, worst := tr.since(start, time.Time{})
	tr.stop()
	var c tableCounts
	waitFor(ctx, 30*time.Second, func() bool {
		c, err = countJobs(ctx, db.pool, false)
		return err == nil && c.pending+c.running == 1 // the job no worker handles
	})
	// The tracker's last insert may commit just after it stops: give every
	// good job the same time to complete before counting one as lost.
	var goodLost int
	waitFor(ctx, 30*time.Second, func() bool {
		err = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE kind = 'good' AND state <> 'completed'`).Scan(&goodLost)
		return err == nil && goodLost == 0
	})
	if err != nil {
		return nil, err
	}
	res.Lost += goodLost
	res.check(goodLost == 0, "%d good jobs did not complete", goodLost)
	res.check(worst <= 2*time.Second, "a good job waited %s while the poison ran", worst.Round(time.Millisecond))
	if err := lr.stop(10 * time.Second); err != nil && !errors.Is(err, context.Canceled) {
		res.check(false, "the runtime failed: %v", err)
	}
	runs := log.snapshot()
	res.Duplicated = len(okTwice(runs))
	res.overlapping(runs, time.Now())
	res.note("%d poison jobs ended dead with a last_error naming the cause (panic, timeout, handler deaf to cancellation, payload not an object, an error text with NUL and invalid UTF-8, stored cleaned) within %.1fs; the job of a kind no worker handles stayed pending, untried",
		dead, poisonedAt.Seconds())
	res.note("%d enqueues refused with an error naming the problem (invalid JSON, queue name not a channel name, NULL payload); a runtime on an invalid queue refused at New", len(refusals))
	res.note("meanwhile %d good jobs were inserted and %d picked up, the longest wait %s", n, picked, worst.Round(time.Millisecond))
	return res, nil
}
