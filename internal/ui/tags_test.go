package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// The jobs page finds jobs by tag and by metadata (through their indexes);
// a job's page shows its tags, its metadata, its own policy and its output.
func TestJobsByTagAndMetadataWithTheirOutput(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	billing, err := runtime.Insert(ctx, db.Pool, "charge", nil, &runtime.InsertOpts{Tags: []string{"billing", "eu"}, Timeout: 1500 * time.Millisecond,
		Metadata: map[string]any{"tenant": "acme"}})
	require.NoError(t, err)
	other, err := runtime.Insert(ctx, db.Pool, "charge", nil, &runtime.InsertOpts{Tags: []string{"other"},
		Metadata: map[string]any{"tenant": "zeta"}})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now(), output = '{"rows": 42}' WHERE id = $1::bigint`, billing)
	require.NoError(t, err)
	srv := serve(t, db, "")
	c := client(t)
	row := func(id int64) string { return fmt.Sprintf(`data-job="%d"`, id) }

	for _, q := range []url.Values{{"tag": {"billing"}}, {"meta": {"tenant=acme"}}, {"tag": {"eu"}, "state": {"completed"}}} {
		code, body := get(t, c, srv.URL+"/jobs?"+q.Encode())
		require.Equal(t, http.StatusOK, code, q)
		require.Contains(t, body, row(billing), q)
		require.NotContains(t, body, row(other), q)
		require.NotContains(t, body, "No index leads", q)
	}
	code, body := get(t, c, srv.URL+"/jobs?meta=tenant%3Dzeta")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, row(other))
	require.NotContains(t, body, row(billing))
	code, body = get(t, c, srv.URL+"/jobs?meta=novalue")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `metadata &#34;novalue&#34; is not KEY=VALUE`)

	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", billing))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<a href="/jobs?tag=billing">billing</a>, <a href="/jobs?tag=eu">eu</a>`)
	require.Contains(t, body, "<pre class=\"payload\" id=\"metadata\">{\n  &#34;tenant&#34;: &#34;acme&#34;\n}</pre>")
	require.Contains(t, body, "<pre class=\"payload\" id=\"output\">{\n  &#34;rows&#34;: 42\n}</pre>")
	// The job's own timeout is its policy, not its metadata.
	require.Contains(t, body, "<pre class=\"payload\" id=\"policy\">{\n  &#34;timeout_ms&#34;: 1500\n}</pre>")
	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", other))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="output"`, "no output, no section")
	require.NotContains(t, body, `id="policy"`, "no policy of its own, no section")
}
