package runtime_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// deepArray is an array nested n deep: 2n bytes of JSON that json.Indent
// turns into about 2n² bytes.
func deepArray(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// requireTableRefused fails unless err is the table's payload trigger
// refusing a row.
func requireTableRefused(t *testing.T, err error, want string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "fila_jobs_payload_limits", pgErr.ConstraintName)
	require.Equal(t, "23514", pgErr.Code)
	require.Contains(t, pgErr.Message, want)
}

// TestPayloadLimits: a 20 KB array nested 9 999 deep, or a payload of
// megabytes, was accepted from Go and from plain SQL alike. Both are
// refused with an error naming the limit, by the Go API before sending and
// by the table's own trigger for any client.
func TestPayloadLimits(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	deep := json.RawMessage(deepArray(9999))
	big := json.RawMessage(`{"blob": "` + strings.Repeat("x", 2<<20) + `"}`)

	_, err := runtime.Insert(ctx, db.Pool, "mail", deep, nil)
	require.ErrorIs(t, err, runtime.ErrPayloadLimit)
	require.ErrorContains(t, err, `payload of kind "mail" nests arrays and objects 9999 deep: at most 64 are allowed`)
	_, err = runtime.Insert(ctx, db.Pool, "mail", big, nil)
	require.ErrorIs(t, err, runtime.ErrPayloadLimit)
	require.ErrorContains(t, err, `payload of kind "mail" is 2097164 bytes as JSON text: at most 1048576 are allowed`)
	_, err = runtime.InsertMany(ctx, db.Pool, []runtime.InsertParams{{Kind: "mail"}, {Kind: "mail", Payload: deep}})
	require.ErrorIs(t, err, runtime.ErrPayloadLimit)
	require.ErrorContains(t, err, "job 1: payload")

	// At the limits exactly, both agree the payload is fine.
	atDepth := json.RawMessage(deepArray(64))
	_, err = runtime.Insert(ctx, db.Pool, "mail", atDepth, nil)
	require.NoError(t, err)
	atSize := json.RawMessage(`"` + strings.Repeat("y", runtime.PayloadMaxBytesDefault-2) + `"`)
	_, err = runtime.Insert(ctx, db.Pool, "mail", atSize, nil)
	require.NoError(t, err)

	// Plain SQL is refused by the table itself, by COPY too, and so is an
	// update that writes a payload.
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('mail', $1::text::jsonb)`, string(deep))
	requireTableRefused(t, err, "nests arrays and objects deeper than 64 levels")
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('mail', $1::text::jsonb)`, string(big))
	requireTableRefused(t, err, "is 2097164 bytes as JSON text: at most 1048576 are allowed")
	// A number such as -1e-1000 is stored in 12 bytes and printed in 1 003.
	amplified := "[" + strings.Repeat("-1e-1000, ", 2000) + "1]"
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) VALUES ('mail', $1::text::jsonb)`, amplified)
	requireTableRefused(t, err, "bytes as JSON text")
	var small int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind) VALUES ('mail') RETURNING id`).Scan(&small))
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET payload = $2::text::jsonb WHERE id = $1`, small, string(deep))
	requireTableRefused(t, err, "deeper than 64 levels")

	// Go's limits raised alone: the table still refuses, and says so.
	wide := &runtime.InsertOpts{PayloadLimits: runtime.PayloadLimits{MaxBytes: 4 << 20, MaxDepth: 10000}}
	_, err = runtime.Insert(ctx, db.Pool, "mail", deep, wide)
	require.ErrorIs(t, err, runtime.ErrPayloadLimit)
	require.ErrorContains(t, err, "the table refused it")
	requireTableRefused(t, err, "deeper than 64 levels")
	many := make([]runtime.InsertParams, runtime.InsertManyCopyMin)
	for i := range many {
		many[i] = runtime.InsertParams{Kind: "mail", InsertOpts: *wide}
	}
	many[7].Payload = big
	_, err = runtime.InsertMany(ctx, db.Pool, many)
	require.ErrorIs(t, err, runtime.ErrPayloadLimit, "through COPY")
	_, err = runtime.InsertMany(ctx, db.Pool, many[:10])
	require.ErrorIs(t, err, runtime.ErrPayloadLimit, "through one statement")

	// Out-of-range limits are refused, naming the field.
	_, err = runtime.Insert(ctx, db.Pool, "mail", nil, &runtime.InsertOpts{PayloadLimits: runtime.PayloadLimits{MaxBytes: 10}})
	require.ErrorContains(t, err, "PayloadLimits.MaxBytes 10 out of range: allowed 1024 to 268435455")
	require.False(t, errors.Is(err, runtime.ErrPayloadLimit))

	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs`).Scan(&n))
	require.Equal(t, 3, n, "nothing refused was written")
}

// TestTablePayloadLimitsCanBeChanged: the limits are the table's, for
// every session at once; rows written under wider limits stay, and are
// still claimed and run.
func TestTablePayloadLimitsCanBeChanged(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	l, ok, err := runtime.TablePayloadLimits(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, runtime.PayloadLimits{MaxBytes: runtime.PayloadMaxBytesDefault, MaxDepth: runtime.PayloadMaxDepthDefault}, l)

	wide := runtime.PayloadLimits{MaxBytes: 4 << 20, MaxDepth: 10000}
	require.NoError(t, runtime.SetTablePayloadLimits(ctx, db.Pool, wide))
	l, _, err = runtime.TablePayloadLimits(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, wide, l)
	deep := json.RawMessage(deepArray(9999))
	big := json.RawMessage(`{"blob": "` + strings.Repeat("x", 2<<20) + `"}`)
	deepID, err := runtime.Insert(ctx, db.Pool, "hold", deep, &runtime.InsertOpts{PayloadLimits: wide})
	require.NoError(t, err)
	bigID, err := runtime.Insert(ctx, db.Pool, "hold", big, &runtime.InsertOpts{PayloadLimits: wide})
	require.NoError(t, err)

	// Back to the defaults (zero fields): the rows stay, and new ones like
	// them are refused.
	require.NoError(t, runtime.SetTablePayloadLimits(ctx, db.Pool, runtime.PayloadLimits{}))
	_, err = db.Pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload) SELECT kind, payload FROM fila_jobs WHERE id = $1`, bigID)
	requireTableRefused(t, err, "bytes as JSON text")

	require.ErrorContains(t, runtime.SetTablePayloadLimits(ctx, db.Pool, runtime.PayloadLimits{MaxDepth: 20000}),
		"PayloadLimits.MaxDepth 20000 out of range: allowed 1 to 10000")
	_, err = db.Pool.Exec(ctx, `SELECT fila_set_payload_limits(10, 64)`)
	require.ErrorContains(t, err, "max_bytes 10 out of range")

	// In the caller's transaction, whose own lock_timeout is kept.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '7s'`)
	require.NoError(t, err)
	require.NoError(t, runtime.SetTablePayloadLimits(ctx, tx, runtime.PayloadLimits{MaxBytes: 2048, MaxDepth: 8}))
	var timeout string
	require.NoError(t, tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&timeout))
	require.Equal(t, "7s", timeout)
	require.NoError(t, tx.Rollback(ctx))
	l, _, err = runtime.TablePayloadLimits(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, runtime.PayloadMaxBytesDefault, l.MaxBytes, "rolled back with the transaction")

	// A dropped trigger enforces nothing, and says so.
	_, err = db.Pool.Exec(ctx, `ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_payload_limits`)
	require.NoError(t, err)
	_, ok, err = runtime.TablePayloadLimits(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = db.Pool.Exec(ctx, `ALTER TABLE fila_jobs ENABLE TRIGGER fila_jobs_payload_limits`)
	require.NoError(t, err)

	// The rows over today's limits are claimed and run like any other.
	done := make(chan int64, 2)
	start(t, baseConfig(t, db, runtime.Kind{Name: "hold", Handler: func(ctx context.Context, j *runtime.Job) error {
		done <- j.ID
		return nil
	}}))
	got := map[int64]bool{}
	for range 2 {
		select {
		case id := <-done:
			got[id] = true
		case <-time.After(20 * time.Second):
			t.Fatal("the jobs over the limits did not run")
		}
	}
	require.Equal(t, map[int64]bool{deepID: true, bigID: true}, got)
	waitFor(t, 10*time.Second, "both completed", func() bool {
		a, _, _ := jobState(t, db, deepID)
		b, _, _ := jobState(t, db, bigID)
		return a == "completed" && b == "completed"
	})
}

// TestPreviewAndStreamBoundWhatTheyRead: a row over every limit — written
// before the limits, or by hand with the trigger off — is read capped by
// PreviewJob and streamed whole by WriteJobPayload a chunk at a time.
func TestPreviewAndStreamBoundWhatTheyRead(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_payload_limits`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, last_error, errors, payload)
SELECT 'hand', 'dead', 1, 1, now(), repeat('é', 100000),
       (SELECT jsonb_agg(jsonb_build_object('attempt', n, 'at', now(), 'error', repeat('x', 10000))) FROM generate_series(1, 50) n)
         || '["not an object"]'::jsonb,
       jsonb_build_object('items', (SELECT jsonb_agg(jsonb_build_object('n', n, 'name', 'naïve item ' || n)) FROM generate_series(1, 400000) n))
RETURNING id`).Scan(&id))
	var size int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM fila_jobs WHERE id = $1`, id).Scan(&size))
	require.Greater(t, size, int64(10<<20))

	p, err := runtime.PreviewJob(ctx, db.Pool, id, 1001)
	require.NoError(t, err)
	require.True(t, p.PayloadCut)
	require.Equal(t, size, p.PayloadBytes)
	require.LessOrEqual(t, len(p.PayloadText), 1001)
	require.Greater(t, len(p.PayloadText), 990)
	require.True(t, strings.HasPrefix(p.PayloadText, `{"items": [{"n": 1, "name": "naïve item 1"}`))
	require.Nil(t, p.Payload)
	require.Len(t, p.Errors, runtime.ErrorsShownMax)
	require.Equal(t, 31, p.ErrorsOmitted)
	require.Equal(t, `"not an object"`, p.Errors[19].Error, "an element that is not an object is shown as text")
	require.Equal(t, 50, p.Errors[18].Attempt)
	require.Len(t, p.Errors[0].Error, runtime.ErrorTextMax)
	require.Equal(t, runtime.ErrorTextMax, len([]rune(p.LastError)))

	none, err := runtime.PreviewJob(ctx, db.Pool, id, 0)
	require.NoError(t, err)
	require.Empty(t, none.PayloadText)
	small, err := runtime.Insert(ctx, db.Pool, "hand", map[string]string{"to": "ana"}, nil)
	require.NoError(t, err)
	whole, err := runtime.PreviewJob(ctx, db.Pool, small, 1000)
	require.NoError(t, err)
	require.False(t, whole.PayloadCut)
	require.Equal(t, `{"to": "ana"}`, whole.PayloadText)
	_, err = runtime.PreviewJob(ctx, db.Pool, small+1000, 10)
	require.ErrorIs(t, err, runtime.ErrJobNotFound)

	listed, err := runtime.ListJobs(ctx, db.Pool, runtime.JobFilter{State: "dead"})
	require.NoError(t, err)
	require.Equal(t, runtime.ErrorTextMax, len([]rune(listed[0].LastError)), "a listing cuts an error written by hand")

	var got countingHash
	var announced int64
	n, err := runtime.WriteJobPayload(ctx, db.Pool, id, &got, func(size int64) error { announced = size; return nil })
	require.NoError(t, err)
	require.Equal(t, size, n)
	require.Equal(t, size, announced)
	require.Equal(t, size, got.n)
	var same bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT md5(payload::text) = $2 FROM fila_jobs WHERE id = $1`, id, got.sum()).Scan(&same))
	require.True(t, same, "the stream is the payload's text, byte for byte")
	require.LessOrEqual(t, got.largest, runtime.PayloadChunk)

	_, err = runtime.WriteJobPayload(ctx, db.Pool, small+1000, &got, func(int64) error { t.Fatal("begun"); return nil })
	require.ErrorIs(t, err, runtime.ErrJobNotFound)
	stop := errors.New("client gone")
	_, err = runtime.WriteJobPayload(ctx, db.Pool, id, &got, func(int64) error { return stop })
	require.ErrorIs(t, err, stop)
}

// countingHash is an io.Writer that keeps the MD5 of what it got, how much,
// and the largest single write.
type countingHash struct {
	h       hash.Hash
	n       int64
	largest int
}

func (c *countingHash) Write(p []byte) (int, error) {
	if c.h == nil {
		c.h = md5.New()
	}
	c.h.Write(p)
	c.n += int64(len(p))
	c.largest = max(c.largest, len(p))
	return len(p), nil
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }
