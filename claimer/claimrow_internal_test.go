package claimer

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// claimShaped returns rows typed as fila_claim's, covering the values a
// claim can return: a summary row, NULLs, negative numbers, times before
// PostgreSQL's epoch, tags empty, NULL, with an empty or multibyte one, and
// one tag.
const claimShaped = `SELECT id::int8, kind::text, payload::text, priority::int2, attempt::int4,
       max_attempts::int4, created_at::timestamptz, started_at::timestamptz, wait_ms::float8,
       rescued::int4, next_due_ms::float8, metadata::text, tags::text[], policy::text
FROM (VALUES
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 3, 'NaN', NULL, NULL, NULL),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1234.5, NULL, NULL, NULL),
  (9007199254740993, 'send_email', '{"to":"a@b"}', -7, 1, 25, '2026-12-07 07:01:02.345678+00',
   '2026-12-07 07:01:03.000001+00', 0.25, NULL, NULL, '{"trace":"x"}', '{}', '{"timeout_ms": 100}'),
  (1, 'k', 'null', 32767, 3, 5, '1999-12-31 23:59:59.999999+00', '1970-01-01 00:00:00+00',
   -1.5, NULL, NULL, NULL, NULL, NULL),
  (2, '', '""', 0, 0, 0, '0001-01-01 00:00:00+00', '2262-01-01 00:00:00.5+00', 1e300, NULL, NULL,
   '{}', '{a,"",ünïcode,"with space"}', ''),
  (3, 'k', '[]', 1, 1, 1, now(), now(), 0, NULL, NULL, NULL, '{x}', NULL)
) AS v(id, kind, payload, priority, attempt, max_attempts, created_at, started_at, wait_ms, rescued,
       next_due_ms, metadata, tags, policy)`

// readClaimRow reads every row a claim can return as pgx's Scan does.
func TestReadClaimRowMatchesScan(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, claimShaped, pgx.QueryExecModeCacheStatement)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rawClaimRows(rows.FieldDescriptions()), "prepared, the rows come in the binary format readClaimRow reads")
	scan := newClaimScan()
	n := 0
	for rows.Next() {
		n++
		var raw, scanned claimRow
		rawErr := readClaimRow(rows.RawValues(), &raw)
		scanErr := scan.read(rows, &scanned)
		if scanErr != nil {
			require.Error(t, rawErr, "row %d: pgx refuses it (%v)", n, scanErr)
			continue
		}
		require.NoError(t, rawErr, "row %d", n)
		// The times are compared as instants (both are in the local
		// location), the rest as values.
		require.True(t, raw.createdAt.Equal(scanned.createdAt), "row %d created_at %v, pgx %v", n, raw.createdAt, scanned.createdAt)
		require.True(t, raw.startedAt.Equal(scanned.startedAt), "row %d started_at %v, pgx %v", n, raw.startedAt, scanned.startedAt)
		require.Equal(t, scanned.createdAt.Location(), raw.createdAt.Location())
		raw.createdAt, raw.startedAt, scanned.createdAt, scanned.startedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if scanned.nextDueMs != scanned.nextDueMs { // NaN
			require.NotEqual(t, raw.nextDueMs, raw.nextDueMs, "row %d next_due NaN", n)
			raw.nextDueMs, scanned.nextDueMs = 0, 0
		}
		require.Equal(t, scanned, raw, "row %d", n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 6, n)

	// An array textArray does not read (a NULL element) is left to pgx,
	// which refuses it as Scan does.
	var withNull []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_send('{x,NULL}'::text[])`).Scan(&withNull))
	_, ok := textArray(withNull)
	require.False(t, ok)
	vals := make([][]byte, len(claimColumns))
	vals[12] = withNull
	require.ErrorContains(t, readClaimRow(vals, new(claimRow)), "NULL")

	// Text results (the exec mode, through a pooler) are left to Scan.
	rows, err = db.Pool.Query(ctx, claimShaped, pgx.QueryExecModeExec)
	require.NoError(t, err)
	fds := rows.FieldDescriptions()
	rows.Close()
	require.False(t, rawClaimRows(fds))
}

// A claim in the prepared mode returns rows readClaimRow reads, and gives
// the same jobs as a claim in the exec mode, whose rows Scan reads.
func TestClaimReadsTheSameJobsInEveryMode(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	for _, q := range []string{"raw", "scan"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind, payload, priority, max_attempts, metadata, tags, policy)
			VALUES ($1, 'k', '{"n":1}', -3, 7, '{"m":"x"}', '{a,b}', '{"timeout_ms": 50}'),
			       ($1, 'other', 'null', 5, 1, NULL, '{}', NULL)`, q)
		require.NoError(t, err)
	}
	direct, err := pgxpool.New(ctx, db.DirectDSN)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	prepared := New(direct)
	prepared.SetStatementMode(pgx.QueryExecModeCacheStatement)
	exec := New(db.Pool)
	exec.SetStatementMode(pgx.QueryExecModeExec)

	rows, err := prepared.query(ctx, sqlClaim, "none", []string{"k"}, 1, 1000.0, []string{}, []string{}, []int32{},
		[]string{}, []string{}, []int32{}, []float64{}, nil)
	require.NoError(t, err)
	fds := rows.FieldDescriptions()
	rows.Close()
	require.True(t, rawClaimRows(fds), "the prepared claim's rows are read without Scan: %+v", fds)
	require.NoError(t, rows.Err())

	kinds := []string{"k", "other"}
	a, err := prepared.Claim(ctx, "raw", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	b, err := exec.Claim(ctx, "scan", kinds, nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, a.Jobs, 2)
	require.Len(t, b.Jobs, 2)
	require.JSONEq(t, `{"timeout_ms": 50}`, string(a.Jobs[0].Policy))
	for i := range a.Jobs {
		x, y := *a.Jobs[i], *b.Jobs[i]
		require.NotZero(t, x.StartedAt)
		require.WithinDuration(t, y.CreatedAt, x.CreatedAt, time.Minute)
		x.ID, x.StartedAt, x.CreatedAt, x.Wait, x.Queue = 0, time.Time{}, time.Time{}, 0, ""
		y.ID, y.StartedAt, y.CreatedAt, y.Wait, y.Queue = 0, time.Time{}, time.Time{}, 0, ""
		require.Equal(t, y, x, "job %d", i)
	}
}

// Claims into one ClaimBuffer reuse its records: each result holds its
// own claim's jobs, and the records of a longer claim before are cleared.
func TestClaimIntoBufferReusesRecords(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind, payload, tags)
		SELECT 'q', 'k', format('{"n":%s}', n)::jsonb, ARRAY['t' || n] FROM generate_series(1, 5) n`)
	require.NoError(t, err)
	s := New(db.Pool)
	var buf ClaimBuffer
	payloads := func(res ClaimResult) (out []string) {
		for _, j := range res.Jobs {
			out = append(out, string(j.Payload)+" "+j.Tags[0])
		}
		return out
	}
	first, err := s.ClaimRatedInto(ctx, &buf, "q", []string{"k"}, nil, nil, 3, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{`{"n": 1} t1`, `{"n": 2} t2`, `{"n": 3} t3`}, payloads(first))
	second, err := s.ClaimRatedInto(ctx, &buf, "q", []string{"k"}, nil, nil, 3, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{`{"n": 4} t4`, `{"n": 5} t5`}, payloads(second))
	for _, j := range second.Jobs {
		require.True(t, j == &buf.jobs[0] || j == &buf.jobs[1], "the first claim's records are reused")
	}
	require.Zero(t, buf.jobs[2], "the third record, unused by the second claim, no longer holds the first's job")
}

// A batch of successes is completed with the same records whether the
// reply's arrays are read from their wire bytes (prepared) or by Scan
// (exec mode).
func TestCompleteReadsTheSameRecordsInEveryMode(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (queue, kind) SELECT 'q', 'k' FROM generate_series(1, 6)`)
	require.NoError(t, err)
	direct, err := pgxpool.New(ctx, db.DirectDSN)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	prepared := New(direct)
	prepared.SetStatementMode(pgx.QueryExecModeCacheStatement)
	exec := New(db.Pool)
	exec.SetStatementMode(pgx.QueryExecModeExec)
	res, err := prepared.Claim(ctx, "q", []string{"k"}, nil, 6, time.Minute)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 6)
	for i, s := range []*Store{prepared, exec} {
		var outs []Outcome
		var want []AttemptKey
		for _, j := range res.Jobs[3*i : 3*i+3] {
			outs = append(outs, Outcome{Attempt: j.Attempt, OK: true})
			want = append(want, j.Attempt.Key())
		}
		fin, err := s.Finish(ctx, outs)
		require.NoError(t, err)
		var got []AttemptKey
		for _, f := range fin {
			require.Equal(t, StateCompleted, f.State)
			got = append(got, f.Key)
		}
		require.ElementsMatch(t, want, got, "store %d", i)
	}
	var completed int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'completed'`).Scan(&completed))
	require.Equal(t, 6, completed)

	// The reply's arrays as readCompleted reads them: empty, and refused
	// (left to Scan) when an element is NULL.
	var empty, withNull []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_send('{}'::bigint[]), array_send('{1,NULL}'::bigint[])`).Scan(&empty, &withNull))
	elems, ok := fixedArray(empty, 8)
	require.True(t, ok)
	require.Empty(t, elems)
	_, ok = fixedArray(withNull, 8)
	require.False(t, ok)
}
