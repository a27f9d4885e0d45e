package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// The workflow page lists a workflow's steps with their states; the jobs
// list filters by workflow; a job's page links to its workflow; and the
// admin cancels and retries a workflow as a unit from its page.
func TestWorkflowPageFilterAndActions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const token = "s3cret-token-0001"
	step := func(name string, after ...string) runtime.WorkflowJob {
		return runtime.WorkflowJob{Name: name, After: after, InsertParams: runtime.InsertParams{Kind: "render"}}
	}
	wf, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{step("fetch"), step("resize", "fetch"), step("publish", "resize")})
	require.NoError(t, err)
	fetch, resize, publish := wf.JobIDs[0], wf.JobIDs[1], wf.JobIDs[2]
	outside := deadJob(t, db, "render", nil, "not in the workflow")
	// fetch completed; resize died, and publish with it.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'running', attempts = 1, started_at = now(), lease_until = now() + interval '1 hour' WHERE id = ANY ($1::bigint[])`, []int64{fetch, resize})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, fetch)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'dead', finished_at = now(), last_error = 'out of memory' WHERE id = $1`, resize)
	require.NoError(t, err)

	srv := serve(t, db, token)
	c := client(t)
	code, body := get(t, c, srv.URL+fmt.Sprintf("/workflows/%d", wf.ID))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="workflow-state">dead</span>`)
	require.Contains(t, body, "3 jobs: 1 completed · 2 dead")
	require.Regexp(t, fmt.Sprintf(`data-job="%d" data-step="fetch" data-state="completed"`, fetch), body)
	require.Regexp(t, fmt.Sprintf(`data-job="%d" data-step="resize" data-state="dead"`, resize), body)
	require.Regexp(t, fmt.Sprintf(`data-job="%d" data-step="publish" data-state="dead"`, publish), body)
	require.Contains(t, body, "out of memory")
	require.NotContains(t, body, `id="retry-workflow"`, "a visitor is offered no action")

	// As data, for scripts.
	req, err := http.NewRequest(http.MethodGet, srv.URL+fmt.Sprintf("/workflows/%d", wf.ID), nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	require.NoError(t, err)
	var got runtime.Workflow
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, wf.ID, got.ID)
	require.Len(t, got.Steps, 3)
	require.Equal(t, []string{"resize"}, got.Steps[2].After)

	code, body = get(t, c, srv.URL+"/workflows")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`data-workflow="%d" data-state="dead"`, wf.ID))

	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs?workflow=%d", wf.ID))
	require.Equal(t, http.StatusOK, code)
	for _, id := range wf.JobIDs {
		require.Contains(t, body, fmt.Sprintf(`data-job="%d"`, id))
	}
	require.NotContains(t, body, fmt.Sprintf(`data-job="%d"`, outside), "a job of no workflow is not listed")
	require.Contains(t, body, `id="workflow-filter"`)
	code, body = get(t, c, srv.URL+"/jobs?workflow=abc")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `workflow &#34;abc&#34; is not a workflow id`)

	code, body = get(t, c, srv.URL+fmt.Sprintf("/jobs/%d", resize))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`<a href="/workflows/%d">workflow %d</a>, step <code>resize</code>`, wf.ID, wf.ID))

	code, body = get(t, c, srv.URL+"/workflows/999999")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "workflow 999999 does not exist")

	// The admin retries the workflow: resize runs again, publish waits for it.
	csrf := login(t, c, srv, token)
	_, body = get(t, c, srv.URL+fmt.Sprintf("/workflows/%d", wf.ID))
	require.Contains(t, body, `id="retry-workflow"`)
	back := fmt.Sprintf("/workflows/%d", wf.ID)
	resp, _ = post(t, c, srv, "/actions/workflows", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(wf.ID, 10)}, "csrf": {csrf}, "back": {back}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, back, resp.Header.Get("Location"))
	require.Equal(t, "completed", jobState(t, db, fetch))
	require.Equal(t, "pending", jobState(t, db, resize))
	require.Equal(t, "waiting", jobState(t, db, publish))
	_, body = get(t, c, srv.URL+back)
	require.Contains(t, body, fmt.Sprintf("workflow %d: retried 2 jobs", wf.ID), "the flash says what was done")
	require.Contains(t, body, `id="cancel-workflow"`)

	// Then cancels it: every unfinished job, and fetch stays completed.
	resp, _ = post(t, c, srv, "/actions/workflows", url.Values{"op": {"cancel"}, "id": {strconv.FormatInt(wf.ID, 10)}, "csrf": {csrf}, "back": {back}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "completed", jobState(t, db, fetch))
	require.Equal(t, "cancelled", jobState(t, db, resize))
	require.Equal(t, "cancelled", jobState(t, db, publish))
	require.Equal(t, "dead", jobState(t, db, outside))

	// Bad input, named.
	resp, body = post(t, c, srv, "/actions/workflows", url.Values{"op": {"explode"}, "id": {"1"}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "explode")
	resp, body = post(t, c, srv, "/actions/workflows", url.Values{"op": {"retry"}, "id": {"999999"}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, "workflow 999999 does not exist")
	// Without the session's CSRF token, nothing happens.
	resp, _ = post(t, client(t), srv, "/actions/workflows", url.Values{"op": {"retry"}, "id": {strconv.FormatInt(wf.ID, 10)}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "cancelled", jobState(t, db, resize))
}
