package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// copyCounter counts the COPY statements a pool runs.
type copyCounter struct{ copies atomic.Int64 }

func (c *copyCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *copyCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *copyCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.copies.Add(1)
	return ctx
}
func (c *copyCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// insertDB is a migrated database of the test's own and a pool on its main
// DSN (through PgBouncer when the suite runs that way) that counts COPYs.
func insertDB(t testing.TB) (*testdb.DB, *pgxpool.Pool, *copyCounter) {
	t.Helper()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	cfg, err := pgconfig.Pool(db.DSN)
	require.NoError(t, err)
	counter := &copyCounter{}
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return db, pool, counter
}

// notifications LISTENs on channels over a direct connection.
type notifications struct {
	conn *pgx.Conn
}

func listen(t *testing.T, db *testdb.DB, channels ...string) *notifications {
	// No worker runs: this listener says it sleeps on every queue, as a
	// program that LISTENs by itself does, so producers notify it.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'insert-test') ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, ch := range channels {
		_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize())
		require.NoError(t, err)
	}
	return &notifications{conn: conn}
}

// drain returns every notification committed before it was called. It sends
// a marker from another session and reads until the marker arrives: the
// server delivers notifications in commit order, so nothing sent earlier can
// still be on its way.
func (n *notifications) drain(t *testing.T, db *testdb.DB, channel string) []*pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := db.Pool.Exec(ctx, "SELECT pg_notify($1::text, 'marker')", channel)
	require.NoError(t, err)
	var got []*pgconn.Notification
	for {
		nt, err := n.conn.WaitForNotification(ctx)
		require.NoError(t, err, "the marker notification never arrived")
		if nt.Channel == channel && nt.Payload == "marker" {
			return got
		}
		got = append(got, nt)
	}
}

func TestInsertManyCopyPath(t *testing.T) {
	t.Parallel()
	db, pool, counter := insertDB(t)
	ctx := context.Background()
	ln := listen(t, db, "fila_a", "fila_b", "fila_later")

	n := InsertManyCopyMin + 500
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	jobs := make([]InsertParams, n)
	for i := range jobs {
		j := InsertParams{Kind: fmt.Sprintf("k%d", i%3), Payload: map[string]int{"i": i}}
		switch i % 4 {
		case 0, 1:
			j.Queue = "a"
		case 2:
			j.Queue = "b"
			j.Priority = int16(i % 5)
			j.MaxAttempts = 9
		case 3:
			j.Queue = "later"
			j.RunAt = later
		}
		jobs[i] = j
	}
	jobs[1].Payload = json.RawMessage("null")

	var before time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&before))
	ids, err := InsertMany(ctx, pool, jobs)
	require.NoError(t, err)
	require.Equal(t, int64(1), counter.copies.Load(), "a batch of %d jobs goes through COPY", n)
	require.Len(t, ids, n)
	for i := 1; i < n; i++ {
		require.Greater(t, ids[i], ids[i-1], "ids follow the order of the jobs")
	}

	rows, err := pool.Query(ctx, `SELECT id, queue, kind, payload::text, priority, max_attempts, run_at,
		state, attempts, created_at FROM fila_jobs ORDER BY id`)
	require.NoError(t, err)
	i := 0
	minID := map[string]int64{}
	for rows.Next() {
		var (
			id                   int64
			queue, kind, payload string
			state                string
			prio                 int16
			maxAttempts, attempt int
			runAt, created       time.Time
		)
		require.NoError(t, rows.Scan(&id, &queue, &kind, &payload, &prio, &maxAttempts, &runAt, &state, &attempt, &created))
		j := jobs[i]
		require.Equal(t, ids[i], id)
		require.Equal(t, j.Queue, queue)
		require.Equal(t, j.Kind, kind)
		if i == 1 {
			require.Equal(t, "null", payload)
		} else {
			require.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), payload)
		}
		require.Equal(t, j.Priority, prio)
		if j.MaxAttempts == 0 {
			require.Equal(t, 5, maxAttempts)
		} else {
			require.Equal(t, j.MaxAttempts, maxAttempts)
		}
		if j.RunAt.IsZero() {
			// The database's clock, not this process's.
			require.False(t, runAt.Before(before), "run_at %s before the insert began (%s)", runAt, before)
			require.False(t, runAt.After(created), "run_at %s after created_at %s", runAt, created)
		} else {
			require.True(t, j.RunAt.Equal(runAt), "run_at %s, want %s", runAt, j.RunAt)
		}
		require.Equal(t, "pending", state)
		require.Zero(t, attempt)
		if _, ok := minID[queue]; !ok {
			minID[queue] = id
		}
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, n, i)

	// One notification per queue with runnable jobs, carrying its first id;
	// none for the queue whose jobs are all scheduled.
	got := map[string][]string{}
	for _, nt := range ln.drain(t, db, "fila_a") {
		got[nt.Channel] = append(got[nt.Channel], nt.Payload)
	}
	require.Equal(t, map[string][]string{
		"fila_a": {fmt.Sprint(minID["a"])},
		"fila_b": {fmt.Sprint(minID["b"])},
	}, got)
}

func TestInsertManyCopyInCallersTransaction(t *testing.T) {
	t.Parallel()
	db, pool, counter := insertDB(t)
	ctx := context.Background()
	ln := listen(t, db, "fila_default")
	jobs := make([]InsertParams, InsertManyCopyMin)
	for i := range jobs {
		jobs[i] = InsertParams{Kind: "k"}
	}
	count := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int {
		var n int
		require.NoError(t, q.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
		return n
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := InsertMany(ctx, tx, jobs)
	require.NoError(t, err)
	require.Len(t, ids, len(jobs))
	require.Equal(t, int64(1), counter.copies.Load())
	require.Equal(t, len(jobs), count(tx), "the transaction sees its own jobs")
	require.Zero(t, count(db.Pool), "no one else sees them before commit")
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, count(db.Pool), "a rolled-back batch leaves nothing")
	require.Empty(t, ln.drain(t, db, "fila_default"), "a rolled-back batch notifies no one")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	ids, err = InsertMany(ctx, tx, jobs)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(2), counter.copies.Load())
	require.Equal(t, len(jobs), count(db.Pool))
	got := ln.drain(t, db, "fila_default")
	require.Len(t, got, 1, "one notification for the whole batch")
	require.Equal(t, fmt.Sprint(ids[0]), got[0].Payload)
}

func TestInsertManyRefusesBadInputBeforeWriting(t *testing.T) {
	t.Parallel()
	_, pool, counter := insertDB(t)
	ctx := context.Background()
	jobs := make([]InsertParams, InsertManyCopyMin+10)
	for i := range jobs {
		jobs[i] = InsertParams{Kind: "k", Payload: map[string]string{"s": "fine"}}
	}
	cases := []struct {
		bad  InsertParams
		want string
	}{
		{InsertParams{Kind: "k", Payload: map[string]string{"s": "a\x00b"}}, `\u0000`},
		{InsertParams{Kind: "k", Payload: []byte("{\"s\": \"\xff\"}")}, "not valid UTF-8"},
		{InsertParams{Kind: "k", Payload: json.RawMessage(`{"s": `)}, "not valid JSON"},
		{InsertParams{Kind: "k", InsertOpts: InsertOpts{Queue: "no spaces"}}, "queue name"},
		{InsertParams{Kind: ""}, "kind is empty"},
	}
	for _, c := range cases {
		batch := append([]InsertParams(nil), jobs...)
		batch[1234] = c.bad
		_, err := InsertMany(ctx, pool, batch)
		require.ErrorContains(t, err, "job 1234")
		require.ErrorContains(t, err, c.want)
		require.NotContains(t, err.Error(), "\n")
	}
	// An escaped backslash before "u0000" is ordinary text, not a NUL.
	batch := append([]InsertParams(nil), jobs...)
	batch[7] = InsertParams{Kind: "k", Payload: json.RawMessage(`{"path": "C:\\u0000"}`)}
	_, err := Insert(ctx, pool, "k", map[string]string{"s": "a\x00b"}, nil)
	require.ErrorContains(t, err, `\u0000`)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n)
	var last *int64
	require.NoError(t, pool.QueryRow(ctx,
		"SELECT last_value FROM pg_sequences WHERE sequencename = 'fila_jobs_id_seq'").Scan(&last))
	require.Nil(t, last, "no id was even reserved")
	require.Zero(t, counter.copies.Load())

	ids, err := InsertMany(ctx, pool, batch)
	require.NoError(t, err)
	var payload string
	require.NoError(t, pool.QueryRow(ctx, "SELECT payload->>'path' FROM fila_jobs WHERE id = $1::bigint", ids[7]).Scan(&payload))
	require.Equal(t, `C:\u0000`, payload)
}

// The COPY path and the single statement write the same rows.
func TestInsertManyPathsAgree(t *testing.T) {
	t.Parallel()
	_, pool, _ := insertDB(t)
	ctx := context.Background()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	var rows []insertRow
	for _, p := range []InsertParams{
		{Kind: "plain"},
		{Kind: "null payload", Payload: json.RawMessage("null")},
		{Kind: "array", Payload: []any{1, "two", nil}, InsertOpts: InsertOpts{Queue: "q.1-x", Priority: -3}},
		{Kind: "ünïcode ✓", Payload: map[string]string{"s": "é\t\"q\""}, InsertOpts: InsertOpts{RunAt: at, MaxAttempts: 1000}},
	} {
		r, err := prepare(p)
		require.NoError(t, err)
		rows = append(rows, r)
	}
	byStatement, err := insertStatement(ctx, pool, rows)
	require.NoError(t, err)
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	byCopy, err := insertCopy(ctx, c, c, rows)
	c.Release()
	require.NoError(t, err)

	read := func(ids []int64) []string {
		var out []string
		for _, id := range ids {
			var s string
			// A job without RunAt is due at the database's now(): the
			// insert's own in one statement, the COPY's batch's otherwise.
			require.NoError(t, pool.QueryRow(ctx, `SELECT concat_ws('|', queue, kind, payload::text, priority, max_attempts,
				CASE WHEN run_at <= created_at AND run_at > created_at - interval '1 minute' THEN 'now' ELSE run_at::text END,
				state, attempts) FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&s))
			out = append(out, s)
		}
		return out
	}
	want := read(byStatement)
	require.Equal(t, want, read(byCopy))
	require.Contains(t, want[3], "2031-05-06 07:08:09.123456")
	require.True(t, sort.SliceIsSorted(byCopy, func(i, j int) bool { return byCopy[i] < byCopy[j] }))
}

// benchJobs are n jobs like a producer's batch: one queue, small payloads.
func benchJobs(n int) []InsertParams {
	jobs := make([]InsertParams, n)
	for i := range jobs {
		jobs[i] = InsertParams{Kind: "bench", Payload: json.RawMessage(fmt.Sprintf(`{"order":%d,"sku":"A-%d"}`, i, i%97))}
	}
	return jobs
}

func prepared(b *testing.B, jobs []InsertParams) []insertRow {
	rows := make([]insertRow, len(jobs))
	for i, j := range jobs {
		r, err := prepare(j)
		require.NoError(b, err)
		rows[i] = r
	}
	return rows
}

// BenchmarkInsertManyPaths times one batch through each path at sizes around
// InsertManyCopyMin, to place it:
//
//	go test -run '^$' -bench InsertManyPaths -benchtime 20x ./runtime/
func BenchmarkInsertManyPaths(b *testing.B) {
	for _, n := range []int{100, 500, 1000, 2000, 5000, 20000} {
		rows := prepared(b, benchJobs(n))
		for _, path := range []string{"statement", "copy"} {
			b.Run(fmt.Sprintf("%s/%d", path, n), func(b *testing.B) {
				_, pool, _ := insertDB(b)
				ctx := context.Background()
				b.ResetTimer()
				for range b.N {
					var err error
					if path == "copy" {
						_, err = insertCopy(ctx, pool, pool, rows)
					} else {
						_, err = insertStatement(ctx, pool, rows)
					}
					require.NoError(b, err)
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// BenchmarkInsertMany100k compares, in one run and on an emptied table each
// time, InsertMany of 100 000 jobs with a plain COPY of the same rows (the
// floor: no ids back, nothing checked) and with the single statement:
//
//	go test -run '^$' -bench InsertMany100k -benchtime 5x ./runtime/
func BenchmarkInsertMany100k(b *testing.B) {
	const n = 100_000
	jobs := benchJobs(n)
	rows := prepared(b, jobs)
	_, pool, _ := insertDB(b)
	ctx := context.Background()
	var insertMany, plainCopy, statement time.Duration
	timed := func(f func() error) time.Duration {
		_, err := pool.Exec(ctx, "TRUNCATE fila_jobs")
		require.NoError(b, err)
		start := time.Now()
		require.NoError(b, f())
		return time.Since(start)
	}
	b.ResetTimer()
	for range b.N {
		insertMany += timed(func() error {
			ids, err := InsertMany(ctx, pool, jobs)
			if err == nil && len(ids) != n {
				err = fmt.Errorf("%d ids", len(ids))
			}
			return err
		})
		plainCopy += timed(func() error {
			_, err := pool.CopyFrom(ctx, pgx.Identifier{"fila_jobs"}, []string{"queue", "kind", "payload", "priority", "max_attempts"},
				pgx.CopyFromSlice(n, func(i int) ([]any, error) {
					r := rows[i]
					return []any{r.queue, r.kind, r.payload, r.priority, r.maxAttempts}, nil
				}))
			return err
		})
		statement += timed(func() error {
			_, err := insertStatement(ctx, pool, rows)
			return err
		})
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	b.ReportMetric(per(insertMany), "insertmany_jobs/s")
	b.ReportMetric(per(plainCopy), "copy_jobs/s")
	b.ReportMetric(per(statement), "statement_jobs/s")
	b.ReportMetric(plainCopy.Seconds()/insertMany.Seconds(), "insertmany/copy")
}

// TestJSONShapeMatchesPostgres: the size the insert API checks before
// sending a payload is the size PostgreSQL prints it at, which the table's
// trigger checks, and the depth is the trigger's depth.
func TestJSONShapeMatchesPostgres(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for _, sample := range []string{
		`{}`, `[]`, `7`, `"x"`, `null`,
		`{"a":1,"b":[1,2,{"c":null}],"d":{}}`,
		"{\n  \"a\" : [ 1 ,\t2 ],\r\n  \"b\": { \"c\": [ [ ] ] }\n}",
		`["a\"b\\c\/d\n\t\b\f\r\u0001\u001f\u00e9\u20ac\ud83d\ude00é€😀 ", "\u0041\u005c"]`,
		`[true,false,null,-2,3.25,0.5,1000000]`,
		`{"z":"last","a":"first","mm":[{"k":"v"}]}`,
		`[[[[[[[[[[1]]]]]]]]]]`,
	} {
		size, depth := jsonShape([]byte(sample))
		var pgSize, pgDepth int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT octet_length(p::text),
			(SELECT coalesce(max(d), 0) FROM generate_series(1, 64) d
			 WHERE jsonb_path_exists(p, ('strict $.**{' || (d - 1) || '} ? (@.type() == "array" || @.type() == "object")')::jsonpath))
			FROM (SELECT $1::text::jsonb AS p) x`, sample).Scan(&pgSize, &pgDepth))
		require.Equal(t, pgSize, size, "size of %s", sample)
		require.Equal(t, pgDepth, depth, "depth of %s", sample)
	}
}

// BenchmarkPayloadLimitsTrigger measures what the table's payload trigger
// (migration 0017) costs an insert, against the same table with the
// trigger disabled, alternating which goes first: InsertMany of 5 000 jobs
// (COPY) and 500 single-row Inserts, for payloads of a few sizes. Payloads
// stored in at most 8 KiB are decided by the trigger's WHEN clause alone;
// larger ones are printed and measured.
//
//	go test -run '^$' -bench PayloadLimitsTrigger -benchtime 5x ./runtime/
func BenchmarkPayloadLimitsTrigger(b *testing.B) {
	line := `{"sku": "SKU-00042", "qty": 3, "price": 19.9, "name": "Product number 42"}`
	payloads := []struct {
		name    string
		payload string
	}{
		{"empty", `{}`},
		{"300B", `{"user_id": 123456, "email": "ana.maria@example.com", "template": "welcome", "locale": "pt-BR", "vars": {"name": "Ana Maria", "plan": "pro", "trial_days": 14, "links": ["https://example.com/a", "https://example.com/b"]}, "request_id": "7f3a9c2e-1b4d-4e8f-9a6b-2c5d8e1f0a3b"}`},
		{"2KB", `{"order": 991, "lines": [` + strings.Repeat(line+", ", 25) + line + `]}`},
		{"16KB", `{"order": 991, "lines": [` + strings.Repeat(line+", ", 200) + line + `]}`},
	}
	for _, p := range payloads {
		b.Run(p.name, func(b *testing.B) {
			_, pool, _ := insertDB(b)
			ctx := context.Background()
			const many, single = 5000, 500
			jobs := make([]InsertParams, many)
			for i := range jobs {
				jobs[i] = InsertParams{Kind: "bench", Payload: json.RawMessage(p.payload)}
			}
			var manyOn, manyOff, singleOn, singleOff time.Duration
			run := func(enabled bool) {
				state := "DISABLE"
				if enabled {
					state = "ENABLE"
				}
				_, err := pool.Exec(ctx, "ALTER TABLE fila_jobs "+state+" TRIGGER fila_jobs_payload_limits")
				require.NoError(b, err)
				_, err = pool.Exec(ctx, "TRUNCATE fila_jobs")
				require.NoError(b, err)
				begin := time.Now()
				_, err = InsertMany(ctx, pool, jobs)
				require.NoError(b, err)
				m := time.Since(begin)
				begin = time.Now()
				for range single {
					_, err := Insert(ctx, pool, "bench", json.RawMessage(p.payload), nil)
					require.NoError(b, err)
				}
				s := time.Since(begin)
				if enabled {
					manyOn, singleOn = manyOn+m, singleOn+s
				} else {
					manyOff, singleOff = manyOff+m, singleOff+s
				}
			}
			b.ResetTimer()
			for i := range b.N {
				run(i%2 == 0)
				run(i%2 != 0)
			}
			b.ReportMetric(float64(many*b.N)/manyOn.Seconds(), "copy-jobs/s")
			b.ReportMetric(manyOff.Seconds()/manyOn.Seconds(), "copy-ratio")
			b.ReportMetric(float64(single*b.N)/singleOn.Seconds(), "single-jobs/s")
			b.ReportMetric(singleOff.Seconds()/singleOn.Seconds(), "single-ratio")
		})
	}
}
