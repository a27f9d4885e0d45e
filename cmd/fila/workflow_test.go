package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/runtime"
)

// workflowStates reads each step's state of a workflow.
func workflowStates(t *testing.T, db *testdb.DB, id int64) map[string]string {
	t.Helper()
	jobs, err := runtime.ListWorkflowJobs(context.Background(), db.Pool, id)
	require.NoError(t, err)
	out := map[string]string{}
	for _, j := range jobs {
		out[j.WorkflowStep] = j.State
	}
	return out
}

// fila workflow lists, shows, retries and cancels a workflow as a unit;
// its jobs show the workflow they belong to.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	step := func(name string, after ...string) runtime.WorkflowJob {
		return runtime.WorkflowJob{Name: name, After: after, InsertParams: runtime.InsertParams{Kind: "noop"}}
	}
	wf, err := runtime.InsertWorkflowID(ctx, db.Pool, []runtime.WorkflowJob{step("a"), step("b", "a"), step("c", "b"), step("d", "a")})
	require.NoError(t, err)
	a, b, c, d := wf.JobIDs[0], wf.JobIDs[1], wf.JobIDs[2], wf.JobIDs[3]
	// As workers would leave them: a completed, b dead (which makes c dead
	// through the flow trigger), d running.
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'running', attempts = 1, started_at = now(), lease_until = now() + interval '1 hour'
WHERE id = ANY ($1::bigint[])`, []int64{a, b, d})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'completed', finished_at = now() WHERE id = $1::bigint`, a)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE fila_jobs SET state = 'dead', finished_at = now(), last_error = 'smtp said no' WHERE id = $1::bigint`, b)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "completed", "b": "dead", "c": "dead", "d": "running"}, workflowStates(t, db, wf.ID))

	out, errOut, code := fila(t, db, "workflow", "list")
	require.Zero(t, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^ID\s+STATE\s+JOBS\s+CREATED\s+FINISHED\s+BY STATE$`, lines[0])
	require.Regexp(t, fmt.Sprintf(`^%d\s+active\s+4\s.*1 running, 1 completed, 2 dead$`, wf.ID), lines[1])

	out, errOut, code = fila(t, db, "workflow", "list", "--json")
	require.Zero(t, code, errOut)
	var listed []runtime.WorkflowSummary
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, wf.ID, listed[0].ID)
	require.Equal(t, 2, listed[0].Counts["dead"])

	out, errOut, code = fila(t, db, "workflow", "show", fmt.Sprint(wf.ID))
	require.Zero(t, code, errOut)
	require.Contains(t, out, fmt.Sprintf("workflow %d: active, 4 jobs (1 running, 1 completed, 2 dead)", wf.ID))
	require.Regexp(t, fmt.Sprintf(`(?m)^a\s+%d\s+noop\s+completed\s+1/5\s+-\s`, a), out)
	require.Regexp(t, fmt.Sprintf(`(?m)^b\s+%d\s+noop\s+dead\s+1/5\s+a\s.*smtp said no$`, b), out)
	require.Regexp(t, fmt.Sprintf(`(?m)^c\s+%d\s+noop\s+dead\s+0/5\s+b\s.*dependency %d ended dead$`, c, b), out)

	seedState(t, db, "noop", "dead") // a job of no workflow
	out, errOut, code = fila(t, db, "jobs", "list", "--workflow", fmt.Sprint(wf.ID), "--json")
	require.Zero(t, code, errOut)
	var inWorkflow []runtime.JobRow
	require.NoError(t, json.Unmarshal([]byte(out), &inWorkflow))
	require.Len(t, inWorkflow, 4, "its jobs only")
	require.Equal(t, d, inWorkflow[0].ID)
	require.Equal(t, "d", inWorkflow[0].WorkflowStep)

	out, errOut, code = fila(t, db, "jobs", "show", fmt.Sprint(c))
	require.Zero(t, code, errOut)
	require.Regexp(t, fmt.Sprintf(`(?m)^workflow\s+%d, step c \(fila workflow show %d\)$`, wf.ID, wf.ID), out)

	out, errOut, code = fila(t, db, "workflow", "retry", fmt.Sprint(wf.ID))
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("job %d: retried (was dead)\njob %d: retried (was dead; waits for the steps before it)\n", b, c), out)
	require.Equal(t, map[string]string{"a": "completed", "b": "pending", "c": "waiting", "d": "running"}, workflowStates(t, db, wf.ID))

	out, errOut, code = fila(t, db, "workflow", "cancel", fmt.Sprint(wf.ID))
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("job %d: cancelled (was pending)\njob %d: cancelled (was waiting)\njob %d: cancelled (was running: its worker stops it at its next heartbeat)\n", b, c, d), out)
	require.Equal(t, map[string]string{"a": "completed", "b": "cancelled", "c": "cancelled", "d": "cancelled"}, workflowStates(t, db, wf.ID))

	out, errOut, code = fila(t, db, "workflow", "cancel", fmt.Sprint(wf.ID))
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("workflow %d: no job left to cancel: every one has finished\n", wf.ID), out)

	// The cancelled ones run again; a, completed, does not.
	out, errOut, code = fila(t, db, "workflow", "retry", "--json", fmt.Sprint(wf.ID))
	require.Zero(t, code, errOut)
	var res runtime.ChangeResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, []int64{b, c, d}, res.IDs())
	require.Equal(t, map[string]string{"a": "completed", "b": "pending", "c": "waiting", "d": "pending"}, workflowStates(t, db, wf.ID))

	_, errOut, code = fila(t, db, "workflow", "show", "999999")
	require.NotZero(t, code)
	require.Contains(t, errOut, "workflow 999999 does not exist")
	_, errOut, code = fila(t, db, "workflow", "retry", "abc")
	require.NotZero(t, code)
	require.Contains(t, errOut, `"abc" is not a workflow id`)
	_, errOut, code = fila(t, db, "workflow", "frobnicate")
	require.NotZero(t, code)
	require.Contains(t, errOut, `unknown workflow command "frobnicate"`)
}
