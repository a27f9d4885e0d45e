package ui_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// handWrittenPayload writes a dead job with payload as it could be before
// the payload limits existed, with the table's trigger off meanwhile where
// there is one.
func handWrittenPayload(t *testing.T, db *testdb.DB, payload string) (id, size int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'fila_jobs_payload_limits') THEN
        ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_payload_limits;
    END IF;
END $$`)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, payload)
VALUES ('big', 'dead', 1, 1, now(), $1::text::jsonb) RETURNING id, octet_length(payload::text)`, payload).Scan(&id, &size))
	_, err = tx.Exec(ctx, `DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'fila_jobs_payload_limits') THEN
        ALTER TABLE fila_jobs ENABLE TRIGGER fila_jobs_payload_limits;
    END IF;
END $$`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return id, size
}

// TestJobPageBoundsHugeAndDeepPayloads: a 20 KB array nested 9 999 deep
// made a 200 MB job page (and 1.2 GB of the dashboard's memory), a 20 MB
// payload a 47 MB page. A page now shows a bounded part of either, and
// links to the payload whole, streamed as a download.
func TestJobPageBoundsHugeAndDeepPayloads(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	deep, deepSize := handWrittenPayload(t, db, strings.Repeat("[", 9999)+strings.Repeat("]", 9999))
	var items strings.Builder
	items.WriteString(`[`)
	for i := range 150000 {
		if i > 0 {
			items.WriteString(", ")
		}
		fmt.Fprintf(&items, `{"id": %d, "name": "item <%d>", "tags": ["a", "b"]}`, i, i)
	}
	items.WriteString(`]`)
	huge, hugeSize := handWrittenPayload(t, db, items.String())
	srv := serve(t, db, "")
	c := client(t)

	code, body := get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", deep))
	require.Equal(t, http.StatusOK, code)
	require.Less(t, len(body), 100<<10, "the page of a deeply nested payload is small")
	require.Contains(t, body, "[…]")
	require.Contains(t, body, `id="payload-elided"`)
	require.Contains(t, body, fmt.Sprintf(`href="/jobs/%d/payload"`, deep))
	require.Contains(t, body, "19\u202f998 bytes of JSON")

	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", huge))
	require.Equal(t, http.StatusOK, code)
	require.Less(t, len(body), 200<<10, "the page of a huge payload is small")
	require.Contains(t, body, `id="payload-cut"`)
	require.Contains(t, body, "&#34;name&#34;: &#34;item &lt;0&gt;&#34;", "the payload is text, escaped")

	for _, p := range []struct{ id, size int64 }{{deep, deepSize}, {huge, hugeSize}} {
		resp, err := c.Get(srv.URL + fmt.Sprintf("/jobs/%d/payload", p.id))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Equal(t, fmt.Sprintf(`attachment; filename="fila-job-%d-payload.json"`, p.id), resp.Header.Get("Content-Disposition"))
		require.Equal(t, p.size, resp.ContentLength)
		h := md5.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, p.size, n)
		var same bool
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT md5(payload::text) = $2 FROM fila_jobs WHERE id = $1`,
			p.id, hex.EncodeToString(h.Sum(nil))).Scan(&same))
		require.True(t, same, "the download is the payload's text, byte for byte")
	}
	code, _ = get(t, c, srv.URL+"/jobs/999999999/payload")
	require.Equal(t, http.StatusNotFound, code)

	// The listings, the dead page and the overview stay small too.
	for _, page := range []string{"/", "/jobs", "/dead", "/jobs?state=dead"} {
		code, body = get(t, c, srv.URL+page)
		require.Equal(t, http.StatusOK, code, page)
		require.Less(t, len(body), 100<<10, page)
	}
}
