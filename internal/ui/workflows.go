package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
)

// workflowsShown is how many workflows the workflows page lists at once.
const workflowsShown = 50

// workflowList is the workflows page.
type workflowList struct {
	Workflows []runtime.WorkflowSummary
	// Next is the id the next (older) page starts before; 0 on the last.
	Next int64
}

func (s *server) workflowsPage(w http.ResponseWriter, r *http.Request) {
	var before int64
	if b := r.URL.Query().Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			s.message(w, r, http.StatusBadRequest, "Workflows", fmt.Sprintf("before %q is not a positive workflow id", b))
			return
		}
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	list, err := runtime.ListWorkflows(ctx, s.pool, runtime.WorkflowFilter{BeforeID: before, Limit: workflowsShown})
	if err != nil {
		s.fail(w, r, "listing workflows", err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, list)
		return
	}
	d := &workflowList{Workflows: list}
	if len(list) == workflowsShown {
		d.Next = list[len(list)-1].ID
	}
	p := s.newPage(w, r, "Workflows", "workflows")
	p.Data = d
	s.render(w, http.StatusOK, "workflows", p)
}

// workflowDetail is a workflow's page: its steps, and what may be done.
type workflowDetail struct {
	*runtime.Workflow
	// CanRetry: some job is dead or cancelled. CanCancel: some job has
	// not finished.
	CanRetry, CanCancel bool
}

func (s *server) workflowPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.message(w, r, http.StatusBadRequest, "No such workflow", fmt.Sprintf("workflow id %q is not a positive whole number", r.PathValue("id")))
		return
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	wf, err := runtime.GetWorkflow(ctx, s.pool, id)
	if errors.Is(err, runtime.ErrWorkflowNotFound) {
		msg := fmt.Sprintf("workflow %d does not exist: no job carries its id (a workflow's id is the id of its first job)", id)
		if wantsJSON(r) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": msg})
			return
		}
		s.message(w, r, http.StatusNotFound, "No such workflow", msg)
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Sprintf("reading workflow %d", id), err)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, wf)
		return
	}
	c := wf.Counts
	d := &workflowDetail{Workflow: wf, CanRetry: c[runtime.StateDead]+c[runtime.StateCancelled] > 0,
		CanCancel: c[runtime.StateWaiting]+c[runtime.StatePending]+c[runtime.StateRunning] > 0}
	p := s.newPage(w, r, fmt.Sprintf("Workflow %d", id), "workflows")
	p.Data = d
	s.render(w, http.StatusOK, "workflow", p)
}

// workflowAction cancels or retries a workflow as a unit.
func (s *server) workflowAction(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r); !ok {
		return
	}
	op := r.PostForm.Get("op")
	act := map[string]func(ctx context.Context, db runtime.DB, id int64) (runtime.ChangeResult, error){
		"retry": runtime.RetryWorkflow, "cancel": runtime.CancelWorkflow,
	}[op]
	if act == nil {
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("workflow action %q is unknown: use retry or cancel", op))
		return
	}
	raw := strings.TrimSpace(r.PostForm.Get("id"))
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("workflow id %q is not a positive whole number", raw))
		return
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	res, err := act(ctx, s.pool, id)
	if errors.Is(err, runtime.ErrWorkflowNotFound) {
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("workflow %d does not exist", id))
		return
	}
	if err != nil {
		s.fail(w, r, op+" workflow", err)
		return
	}
	s.log.Info("workflow changed", zap.String("action", op), zap.Int64("workflow_id", id), zap.Int64s("changed", res.IDs()),
		zap.Int("skipped", len(res.Skipped)))
	s.done(w, r, res, fmt.Sprintf("workflow %d: %s", id, describeChange(op, res)))
}

// stateCounts spells a workflow's jobs per state, in a job's life order.
func stateCounts(counts map[string]int) string {
	var parts []string
	for _, st := range runtime.JobStates() {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, " · ")
}
