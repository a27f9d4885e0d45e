package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Workflows as units: every job of one InsertWorkflow carries the
// workflow's id (the id of its first job) and its step's name (migration
// 0027). The functions below list a workflow's jobs, cancel and retry them
// together, and read a step's dependencies' outputs by name. Each finds the
// workflow's rows through fila_jobs_workflow_idx, a partial index that jobs
// outside workflows are not in: the claim does not change.

// ErrWorkflowNotFound is wrapped by the errors of GetWorkflow,
// ListWorkflowJobs, CancelWorkflow and RetryWorkflow when no job carries
// the workflow id (it never existed, or retention deleted all its jobs).
var ErrWorkflowNotFound = errors.New("no such workflow")

// ErrStepNotFound is wrapped by StepOutput's error when the job has no
// dependency of that step name.
var ErrStepNotFound = errors.New("no such step among the job's dependencies")

// ErrNoOutput is wrapped by StepOutput's error when the step recorded no
// output (Job.SetOutput), or has not completed.
var ErrNoOutput = errors.New("the step recorded no output")

// Workflow states, as WorkflowSummary.State gives them: derived from its
// jobs' states, never stored.
const (
	// WorkflowActive: some job is still waiting, pending or running.
	WorkflowActive = "active"
	// WorkflowCompleted: every job completed.
	WorkflowCompleted = "completed"
	// WorkflowDead: every job finished, at least one dead (RetryWorkflow
	// runs it and what followed it again).
	WorkflowDead = "dead"
	// WorkflowCancelled: every job finished, none dead, at least one
	// cancelled.
	WorkflowCancelled = "cancelled"
)

// WorkflowSummary is a workflow's progress: its jobs counted by state.
type WorkflowSummary struct {
	ID    int64  `json:"id"`
	State string `json:"state"`
	Jobs  int    `json:"jobs"`
	// Counts are its jobs per state (JobStates); a state no job is in is
	// left out.
	Counts    map[string]int `json:"counts"`
	CreatedAt time.Time      `json:"created_at"`
	// FinishedAt is when its last job finished, once all have.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// WorkflowJobRow is one job of a workflow, with the steps it waits for.
type WorkflowJobRow struct {
	JobRow
	// After names the steps of the workflow the job waits for, in id order;
	// DependsOn is every job it waits for, by id (InsertOpts.After may add
	// jobs from outside the workflow).
	After     []string `json:"after"`
	DependsOn []int64  `json:"depends_on,omitempty"`
}

// Workflow is a workflow with its jobs (GetWorkflow).
type Workflow struct {
	WorkflowSummary
	// Steps are its jobs in id order: each after the jobs it waits for.
	Steps []WorkflowJobRow `json:"steps"`
}

// WorkflowFilter selects workflows for ListWorkflows.
type WorkflowFilter struct {
	// BeforeID selects the workflows whose id is below it: the next page
	// starts before the last id listed.
	BeforeID int64
	// Limit caps the workflows listed, newest first. Defaults to
	// ListLimitDefault; allowed 1 to ListLimitMax.
	Limit int
}

const (
	// The workflow's jobs by its index, each with the step names and ids
	// of the jobs it waits for.
	workflowJobsSQL = `SELECT ` + boundedColumns + `,
       coalesce((SELECT array_agg(d.workflow_step ORDER BY d.id) FROM fila_jobs d
                 WHERE d.id = ANY (j.depends_on) AND d.workflow_id = j.workflow_id AND d.workflow_step IS NOT NULL), '{}'),
       j.depends_on
FROM fila_jobs j
WHERE j.workflow_id = $1::bigint
ORDER BY j.id`

	// The newest workflows first: the distinct ids come from walking the
	// index backwards, stopping after $2 of them.
	listWorkflowsSQL = `WITH w AS (
    SELECT DISTINCT workflow_id AS id FROM fila_jobs
    WHERE workflow_id IS NOT NULL AND ($1::bigint IS NULL OR workflow_id < $1::bigint)
    ORDER BY workflow_id DESC
    LIMIT $2::int
)
SELECT w.id, j.state, count(*), min(j.created_at), max(j.finished_at)
FROM w JOIN fila_jobs j ON j.workflow_id = w.id
GROUP BY w.id, j.state
ORDER BY w.id DESC`

	workflowCountsSQL = `SELECT j.workflow_id, j.state, count(*), min(j.created_at), max(j.finished_at)
FROM fila_jobs j WHERE j.workflow_id = $1::bigint
GROUP BY j.workflow_id, j.state`

	// Every job of the workflow not finished yet, under its row lock taken
	// in id order (as a finish takes its dependents'), cancelled as Cancel
	// cancels one. The finish trigger runs after the whole statement, so it
	// finds none of the workflow's dependents still waiting: nothing of the
	// workflow runs afterwards, whatever its OnDependencyFailure.
	cancelWorkflowSQL = `WITH picked AS (
    SELECT j.id, j.state FROM fila_jobs j
    WHERE j.workflow_id = $1::bigint AND j.state IN ('waiting', 'pending', 'running')
    ORDER BY j.id
    FOR UPDATE
), changed AS (
    UPDATE fila_jobs j
    SET state = 'cancelled', finished_at = now(),
        lease_until = CASE WHEN j.state = 'running' THEN j.lease_until END
    FROM picked p
    WHERE j.id = p.id AND j.state IN ('waiting', 'pending', 'running')
    RETURNING j.id
)
SELECT p.id, p.state, c.id IS NOT NULL
FROM picked p
LEFT JOIN changed c ON c.id = p.id
ORDER BY p.id`

	retryWorkflowSQL = `SELECT r.o_id, r.o_from, r.o_to, CASE WHEN j.run_at > now() THEN j.run_at END, coalesce(j.last_error, '')
FROM fila_workflow_retry($1::bigint) r
JOIN fila_jobs j ON j.id = r.o_id
ORDER BY r.o_id`

	workflowExistsSQL = `SELECT EXISTS (SELECT 1 FROM fila_jobs WHERE workflow_id = $1::bigint)`

	dependencyOutputSQL = `SELECT d.id, d.kind, d.state, d.output::text, coalesce(d.workflow_step, '')
FROM fila_jobs j
JOIN fila_jobs d ON d.id = ANY (j.depends_on)
WHERE j.id = $1::bigint AND d.workflow_step = $2::text`
)

// summarize completes a workflow's summary from its counts.
func (w *WorkflowSummary) summarize() {
	unfinished := w.Counts[StateWaiting] + w.Counts[StatePending] + w.Counts[StateRunning]
	switch {
	case unfinished > 0:
		w.State, w.FinishedAt = WorkflowActive, nil
	case w.Counts[StateDead] > 0:
		w.State = WorkflowDead
	case w.Counts[StateCancelled] > 0:
		w.State = WorkflowCancelled
	default:
		w.State = WorkflowCompleted
	}
}

// scanSummaries reads rows of (workflow id, state, count, first created,
// last finished), grouped by workflow in the order they come.
func scanSummaries(rows pgx.Rows) ([]WorkflowSummary, error) {
	defer rows.Close()
	var out []WorkflowSummary
	for rows.Next() {
		var (
			id       int64
			state    string
			n        int
			created  time.Time
			finished *time.Time
		)
		if err := rows.Scan(&id, &state, &n, &created, &finished); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].ID != id {
			out = append(out, WorkflowSummary{ID: id, Counts: map[string]int{}, CreatedAt: created})
		}
		w := &out[len(out)-1]
		w.Jobs += n
		w.Counts[state] = n
		if created.Before(w.CreatedAt) {
			w.CreatedAt = created
		}
		if finished != nil && (w.FinishedAt == nil || finished.After(*w.FinishedAt)) {
			w.FinishedAt = finished
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].summarize()
	}
	return out, nil
}

// ListWorkflows returns the newest workflows f selects, each with its jobs
// counted by state.
func ListWorkflows(ctx context.Context, db DB, f WorkflowFilter) ([]WorkflowSummary, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = ListLimitDefault
	case limit < 1 || limit > ListLimitMax:
		return nil, fmt.Errorf("list workflows: Limit %d out of range: allowed 1 to %d", f.Limit, ListLimitMax)
	}
	var before *int64
	switch {
	case f.BeforeID < 0:
		return nil, fmt.Errorf("list workflows: BeforeID %d is negative", f.BeforeID)
	case f.BeforeID > 0:
		before = &f.BeforeID
	}
	rows, err := db.Query(ctx, listWorkflowsSQL, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	out, err := scanSummaries(rows)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	if out == nil {
		out = []WorkflowSummary{}
	}
	return out, nil
}

// GetWorkflow returns a workflow's progress and every one of its jobs, in
// id order. An id no job carries is an error wrapping ErrWorkflowNotFound.
func GetWorkflow(ctx context.Context, db DB, id int64) (*Workflow, error) {
	rows, err := db.Query(ctx, workflowCountsSQL, id)
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", id, err)
	}
	sums, err := scanSummaries(rows)
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", id, err)
	}
	if len(sums) == 0 {
		return nil, fmt.Errorf("workflow %d: %w", id, ErrWorkflowNotFound)
	}
	steps, err := ListWorkflowJobs(ctx, db, id)
	if err != nil {
		return nil, err
	}
	return &Workflow{WorkflowSummary: sums[0], Steps: steps}, nil
}

// ListWorkflowJobs returns every job of a workflow in id order (each after
// the jobs it waits for), with the steps it waits for. Payload and Errors
// are left empty, as ListJobs leaves them. An id no job carries is an
// error wrapping ErrWorkflowNotFound.
func ListWorkflowJobs(ctx context.Context, db DB, id int64) ([]WorkflowJobRow, error) {
	rows, err := db.Query(ctx, workflowJobsSQL, id)
	if err != nil {
		return nil, fmt.Errorf("list workflow %d: %w", id, err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkflowJobRow, error) {
		var j WorkflowJobRow
		err := row.Scan(append(jobRowFields(&j.JobRow), &j.After, &j.DependsOn)...)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("list workflow %d: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("workflow %d: %w", id, ErrWorkflowNotFound)
	}
	return jobs, nil
}

// workflowExists tells a workflow with nothing to change from one that
// does not exist.
func workflowExists(ctx context.Context, db DB, id int64) error {
	var ok bool
	if err := db.QueryRow(ctx, workflowExistsSQL, id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("workflow %d: %w", id, ErrWorkflowNotFound)
	}
	return nil
}

// CancelWorkflow cancels every job of a workflow that has not finished,
// waiting, pending or running, in one statement, as Cancel cancels each:
// a running one is stopped by its worker within a heartbeat, and none of
// the workflow's jobs runs afterwards. Finished jobs (completed, dead,
// cancelled) stay as they are, and are not listed. An id no job carries is
// an error wrapping ErrWorkflowNotFound.
func CancelWorkflow(ctx context.Context, db DB, id int64) (ChangeResult, error) {
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	rows, err := db.Query(ctx, cancelWorkflowSQL, id)
	if err != nil {
		return res, fmt.Errorf("cancel workflow %d: %w", id, err)
	}
	for rows.Next() {
		var (
			jobID   int64
			state   string
			changed bool
		)
		if err := rows.Scan(&jobID, &state, &changed); err != nil {
			rows.Close()
			return res, fmt.Errorf("cancel workflow %d: %w", id, err)
		}
		if changed {
			res.Changed = append(res.Changed, JobChange{ID: jobID, From: state, To: StateCancelled})
		} else {
			res.Skipped = append(res.Skipped, JobSkip{ID: jobID, State: state,
				Reason: fmt.Sprintf("job %d was %s but finished meanwhile; look at it again", jobID, state)})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("cancel workflow %d: %w", id, err)
	}
	if len(res.Changed)+len(res.Skipped) == 0 {
		if err := workflowExists(ctx, db, id); err != nil {
			return res, fmt.Errorf("cancel workflow: %w", err)
		}
	}
	return res, nil
}

// RetryWorkflow runs a workflow's failed part again, as a unit, in one
// statement: each of its dead and cancelled jobs starts over (attempts from
// 0, its error history kept), pending at once when it waits for nothing
// (JobChange.To "pending"), else waiting until the jobs it waits for
// complete ("waiting") — so a job that died runs again, and the jobs that
// ended dead or cancelled because of it run after it, in the workflow's
// order. Completed jobs do not run again. A job that waits for a job
// outside the workflow that is still dead or cancelled ends as that job
// makes it end (as at its insert), and is listed in Skipped. A job
// cancelled while it ran is due only once that attempt's lease ends
// (JobChange.RunsAt), as Retry does. An id no job carries is an error
// wrapping ErrWorkflowNotFound.
func RetryWorkflow(ctx context.Context, db DB, id int64) (ChangeResult, error) {
	res := ChangeResult{Changed: []JobChange{}, Skipped: []JobSkip{}}
	rows, err := db.Query(ctx, retryWorkflowSQL, id)
	if err != nil {
		return res, fmt.Errorf("retry workflow %d: %w", id, err)
	}
	for rows.Next() {
		var (
			jobID          int64
			from, to, last string
			runsAt         *time.Time
		)
		if err := rows.Scan(&jobID, &from, &to, &runsAt, &last); err != nil {
			rows.Close()
			return res, fmt.Errorf("retry workflow %d: %w", id, err)
		}
		switch to {
		case StatePending, StateWaiting:
			res.Changed = append(res.Changed, JobChange{ID: jobID, From: from, To: to, RunsAt: runsAt})
		default:
			res.Skipped = append(res.Skipped, JobSkip{ID: jobID, State: to,
				Reason: fmt.Sprintf("job %d ended %s again: %s", jobID, to, last)})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("retry workflow %d: %w", id, err)
	}
	if len(res.Changed)+len(res.Skipped) == 0 {
		if err := workflowExists(ctx, db, id); err != nil {
			return res, fmt.Errorf("retry workflow: %w", err)
		}
	}
	return res, nil
}

// DependencyOutputsByStep returns the outputs of the jobs job waits for
// that are steps of a workflow, by step name (WorkflowJob.Name): what a
// step's handler reads of the steps before it, whatever their ids. A
// dependency that is no step (InsertOpts.After by id) is left out;
// DependencyOutputs lists every one.
func DependencyOutputsByStep(ctx context.Context, db DB, jobID int64) (map[string]DependencyOutput, error) {
	outs, err := DependencyOutputs(ctx, db, jobID)
	if err != nil {
		return nil, err
	}
	byStep := make(map[string]DependencyOutput, len(outs))
	for _, d := range outs {
		if d.Step != "" {
			byStep[d.Step] = d
		}
	}
	return byStep, nil
}

// StepOutput decodes into a T the output of the dependency of job jobID
// whose step name is step: the typed way for a step's handler to read what
// a step before it recorded (Job.SetOutput). No dependency of that name is
// an error wrapping ErrStepNotFound; one that recorded no output (or has
// not completed: a job with OnDependencyFailure "run" may read a dead one)
// an error wrapping ErrNoOutput.
func StepOutput[T any](ctx context.Context, db DB, jobID int64, step string) (T, error) {
	var (
		v      T
		d      DependencyOutput
		output *string
	)
	err := db.QueryRow(ctx, dependencyOutputSQL, jobID, step).Scan(&d.ID, &d.Kind, &d.State, &output, &d.Step)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("job %d: step %q: %w", jobID, step, ErrStepNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("job %d: output of step %q: %w", jobID, step, err)
	}
	if output == nil {
		return v, fmt.Errorf("job %d: step %q (job %d, %s): %w", jobID, step, d.ID, d.State, ErrNoOutput)
	}
	if err := json.Unmarshal([]byte(*output), &v); err != nil {
		return v, fmt.Errorf("job %d: output of step %q (job %d) does not decode into %T: %w", jobID, step, d.ID, v, err)
	}
	return v, nil
}
