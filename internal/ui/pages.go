package ui

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/jsonpreview"
	"github.com/fila-run/fila/runtime"
)

// pageSize is how many jobs a listing shows; the next page starts before
// the last id shown.
const pageSize = 50

func (s *server) overviewPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.queryContext(r)
	defer cancel()
	o, err := readOverview(ctx, s.pool)
	if err != nil {
		s.fail(w, r, "reading the overview", err)
		return
	}
	p := s.newPage(w, r, "Overview", "overview")
	p.Data = o
	s.render(w, http.StatusOK, "overview", p)
}

// jobSearch is the jobs page's form. Tag and Meta (KEY=VALUE, the value
// a JSON string) select by the indexes on tags and metadata.
type jobSearch struct {
	ID, Kind, State, Queue, Tag, Meta string
	// Workflow selects the jobs of one workflow, by its id.
	Workflow string
	Before   int64
}

func (q jobSearch) query(before int64) string {
	v := url.Values{}
	for k, val := range map[string]string{"kind": q.Kind, "state": q.State, "queue": q.Queue, "tag": q.Tag, "meta": q.Meta, "workflow": q.Workflow} {
		if val != "" {
			v.Set(k, val)
		}
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	return v.Encode()
}

// jobList is a page of jobs.
type jobList struct {
	Search jobSearch
	// States are what the state may be: every state, and the scheduled and
	// retrying views of pending (runtime.ListStates).
	States []string
	// Heading names the listing: "Jobs", or the view it shows.
	Heading string
	// Paused is set when the listing is of one queue, and it is paused.
	Paused *pausedQueue
	Jobs   []runtime.JobRow
	// Next is the query of the next (older) page, "" on the last one; it
	// is built by url.Values.Encode, so it is a query as it stands.
	Next template.URL
	// Unindexed is true for a search on kind or queue without a state,
	// which no index leads with.
	Unindexed bool
	Problem   string
}

// pausedQueue is a paused queue, for a listing's banner.
type pausedQueue struct {
	Queue string
	For   time.Duration
}

// pausedSinceSQL reads how long a queue has been paused, if it is.
const pausedSinceSQL = `SELECT now() - updated_at FROM fila_queues WHERE queue = $1::text AND paused`

// viewHeadings name the listings the navigation links to.
var viewHeadings = map[string]string{
	runtime.StateRunning:   "Running jobs",
	runtime.StateScheduled: "Scheduled jobs: pending, due later",
	runtime.StateRetrying:  "Retrying jobs: pending again after a failed attempt",
}

func (s *server) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	search := jobSearch{ID: strings.TrimSpace(q.Get("id")), Kind: strings.TrimSpace(q.Get("kind")),
		State: q.Get("state"), Queue: strings.TrimSpace(q.Get("queue")),
		Tag: strings.TrimSpace(q.Get("tag")), Meta: strings.TrimSpace(q.Get("meta")), Workflow: strings.TrimSpace(q.Get("workflow"))}
	list := &jobList{Search: search, States: runtime.ListStates(), Heading: "Jobs"}
	if search.ID != "" {
		id, err := strconv.ParseInt(strings.TrimPrefix(search.ID, "#"), 10, 64)
		if err != nil || id <= 0 {
			list.Problem = fmt.Sprintf("job id %q is not a positive whole number", search.ID)
		} else {
			http.Redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
			return
		}
	}
	if b := q.Get("before"); b != "" && list.Problem == "" {
		before, err := strconv.ParseInt(b, 10, 64)
		if err != nil || before <= 0 {
			list.Problem = fmt.Sprintf("before %q is not a positive job id", b)
		}
		search.Before = before
	}
	if search.State != "" && !slices.Contains(list.States, search.State) && list.Problem == "" {
		list.Problem = fmt.Sprintf("state %q is unknown: use %s", search.State, strings.Join(list.States, ", "))
	}
	if search.Queue != "" && list.Problem == "" {
		if err := channel.ValidateQueue(search.Queue); err != nil {
			list.Problem = err.Error()
		}
	}
	var workflow int64
	if search.Workflow != "" && list.Problem == "" {
		var err error
		if workflow, err = strconv.ParseInt(search.Workflow, 10, 64); err != nil || workflow <= 0 {
			list.Problem = fmt.Sprintf("workflow %q is not a workflow id (a positive whole number: the id of its first job)", search.Workflow)
		}
	}
	var meta map[string]any
	if search.Meta != "" && list.Problem == "" {
		k, v, ok := strings.Cut(search.Meta, "=")
		if !ok || k == "" {
			list.Problem = fmt.Sprintf("metadata %q is not KEY=VALUE", search.Meta)
		}
		meta = map[string]any{k: v}
	}
	list.Search = search
	list.Unindexed = search.State == "" && search.Tag == "" && search.Meta == "" && search.Workflow == "" && (search.Kind != "" || search.Queue != "")
	nav := "jobs"
	if h, ok := viewHeadings[search.State]; ok && list.Problem == "" {
		list.Heading, nav = h, search.State
	}
	p := s.newPage(w, r, list.Heading, nav)
	p.Data = list
	if list.Problem != "" {
		s.render(w, http.StatusBadRequest, "jobs", p)
		return
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	if search.Queue != "" {
		var paused time.Duration
		err := s.pool.QueryRow(ctx, pausedSinceSQL, search.Queue).Scan(&paused)
		switch {
		case err == nil:
			list.Paused = &pausedQueue{Queue: search.Queue, For: paused}
		case !errors.Is(err, pgx.ErrNoRows):
			s.fail(w, r, "reading whether the queue is paused", err)
			return
		}
	}
	jobs, err := runtime.ListJobs(ctx, s.pool, runtime.JobFilter{State: search.State, Kind: search.Kind,
		Queue: search.Queue, Tag: search.Tag, Metadata: meta, BeforeID: search.Before, Limit: pageSize, WorkflowID: workflow})
	if err != nil {
		s.fail(w, r, "searching jobs", err)
		return
	}
	list.Jobs = jobs
	if len(jobs) == pageSize {
		list.Next = template.URL(search.query(jobs[len(jobs)-1].ID))
	}
	s.render(w, http.StatusOK, "jobs", p)
}

// jobDetail is one job with what the page derives from it.
type jobDetail struct {
	Job *runtime.JobPreview
	// Payload is the payload indented, within the page's limits; Cut and
	// Elided say what it leaves out (PreviewBytes, PreviewDepth).
	Payload                    string
	PayloadCut, PayloadElided  bool
	PreviewBytes, PreviewDepth int
	// Waited is from when the job was due to its last attempt's start;
	// Ran, that attempt's run time. Nil when unknown.
	Waited, Ran *time.Duration
	// Metadata, Policy (its own timeout and retry) and Output are the
	// job's, indented; "" for none.
	Metadata, Policy, Output string
	// Flow is the job's place in its flows; nil when it has none.
	Flow       *runtime.JobFlow
	CanRetry   bool
	CanRelease bool
	CanCancel  bool
	CanDelete  bool
}

func (s *server) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.message(w, r, http.StatusBadRequest, "No such job", fmt.Sprintf("job id %q is not a positive whole number", r.PathValue("id")))
		return
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	job, err := runtime.PreviewJob(ctx, s.pool, id, 2*s.opts.PayloadPreviewBytes)
	if errors.Is(err, runtime.ErrJobNotFound) {
		s.message(w, r, http.StatusNotFound, "No such job", fmt.Sprintf("job %d does not exist (it may have been deleted, or removed by retention once completed)", id))
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Sprintf("reading job %d", id), err)
		return
	}
	preview := jsonpreview.Indent([]byte(job.PayloadText), !job.PayloadCut, "", "  ",
		jsonpreview.Limits{MaxBytes: s.opts.PayloadPreviewBytes, MaxDepth: s.opts.PayloadPreviewDepth})
	d := &jobDetail{Job: job, Payload: preview.Text, PayloadCut: preview.Cut, PayloadElided: preview.Elided,
		PreviewBytes: s.opts.PayloadPreviewBytes, PreviewDepth: s.opts.PayloadPreviewDepth,
		CanRetry: runtime.CanRetryJob(job.JobRow), CanRelease: runtime.CanRelease(job.State), CanCancel: runtime.CanCancel(job.State),
		CanDelete: runtime.CanDelete(job.State)}
	flow, err := runtime.GetJobFlow(ctx, s.pool, id)
	if err != nil {
		s.fail(w, r, fmt.Sprintf("reading job %d's flows", id), err)
		return
	}
	if flow.Any {
		d.Flow = &flow
	}
	// They are bounded (runtime.MetadataMaxBytes, runtime.OutputMax, a
	// policy's few keys): the page shows them whole.
	for _, f := range []struct {
		raw []byte
		to  *string
	}{{job.Metadata, &d.Metadata}, {job.Policy, &d.Policy}, {job.Output, &d.Output}} {
		if f.raw != nil {
			*f.to = jsonpreview.Indent(f.raw, true, "", "  ", jsonpreview.Limits{MaxBytes: 1 << 20, MaxDepth: 64}).Text
		}
	}
	if job.StartedAt != nil {
		due := job.CreatedAt
		if job.RunAt.After(due) {
			due = job.RunAt
		}
		if job.StartedAt.After(due) || job.StartedAt.Equal(due) {
			waited := job.StartedAt.Sub(due)
			d.Waited = &waited
		}
		if job.FinishedAt != nil && !job.FinishedAt.Before(*job.StartedAt) {
			ran := job.FinishedAt.Sub(*job.StartedAt)
			d.Ran = &ran
		}
	}
	p := s.newPage(w, r, fmt.Sprintf("Job %d", id), "jobs")
	p.Data = d
	s.render(w, http.StatusOK, "job", p)
}

// payloadDownload streams a job's payload whole, as a JSON file to save:
// a chunk at a time (runtime.WriteJobPayload), never built in memory,
// and at most downloadsMax at once.
func (s *server) payloadDownload(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.message(w, r, http.StatusBadRequest, "No such job", fmt.Sprintf("job id %q is not a positive whole number", r.PathValue("id")))
		return
	}
	select {
	case s.downloads <- struct{}{}:
		defer func() { <-s.downloads }()
	default:
		w.Header().Set("Retry-After", "10")
		s.message(w, r, http.StatusServiceUnavailable, "Busy", fmt.Sprintf("%d payloads are being downloaded already; try again in a moment", downloadsMax))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), downloadTimeout)
	defer cancel()
	_, err = runtime.WriteJobPayload(ctx, s.pool, id, w, func(size int64) error {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="fila-job-%d-payload.json"`, id))
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		return nil
	})
	switch {
	case errors.Is(err, runtime.ErrJobNotFound):
		s.message(w, r, http.StatusNotFound, "No such job", fmt.Sprintf("job %d does not exist (it may have been deleted, or removed by retention once completed)", id))
	case err != nil && w.Header().Get("Content-Length") == "":
		s.fail(w, r, fmt.Sprintf("reading job %d's payload", id), err)
	case err != nil:
		// The headers are out: all that is left is to cut the response
		// short, which the browser reports as a failed download.
		s.log.Warn("payload download cut short", zap.Int64("job_id", id), zap.Error(err))
		panic(http.ErrAbortHandler)
	}
}

// deadList is the dead jobs page.
type deadList struct {
	Kinds []deadKind
	// MoreKinds is true when more kinds have dead jobs than deadKindsShown.
	MoreKinds bool
	Kind      string
	Jobs      []runtime.JobRow
	Next      template.URL // as jobList.Next
}

// deadKindsSQL counts dead jobs per kind from fila_jobs_dead_idx alone,
// the $1 kinds with the most.
const deadKindsSQL = `SELECT kind, count(*) FROM fila_jobs WHERE state = 'dead' GROUP BY kind ORDER BY count(*) DESC, kind LIMIT $1::int`

// deadKindsShown bounds the kinds the dead jobs page lists: kinds are
// written by whoever enqueues, and need not be few.
const deadKindsShown = 100

func (s *server) deadPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &deadList{Kind: strings.TrimSpace(q.Get("kind"))}
	var before int64
	if b := q.Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			s.message(w, r, http.StatusBadRequest, "Dead jobs", fmt.Sprintf("before %q is not a positive job id", b))
			return
		}
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	rows, err := s.pool.Query(ctx, deadKindsSQL, deadKindsShown+1)
	if err != nil {
		s.fail(w, r, "counting dead jobs", err)
		return
	}
	for rows.Next() {
		var k deadKind
		if err := rows.Scan(&k.Kind, &k.Dead); err != nil {
			rows.Close()
			s.fail(w, r, "counting dead jobs", err)
			return
		}
		d.Kinds = append(d.Kinds, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		s.fail(w, r, "counting dead jobs", err)
		return
	}
	if len(d.Kinds) > deadKindsShown {
		d.Kinds, d.MoreKinds = d.Kinds[:deadKindsShown], true
	}
	d.Jobs, err = runtime.ListJobs(ctx, s.pool, runtime.JobFilter{State: runtime.StateDead, Kind: d.Kind, BeforeID: before, Limit: pageSize})
	if err != nil {
		s.fail(w, r, "listing dead jobs", err)
		return
	}
	if len(d.Jobs) == pageSize {
		v := url.Values{"before": {strconv.FormatInt(d.Jobs[len(d.Jobs)-1].ID, 10)}}
		if d.Kind != "" {
			v.Set("kind", d.Kind)
		}
		d.Next = template.URL(v.Encode())
	}
	p := s.newPage(w, r, "Dead jobs", "dead")
	p.Data = d
	s.render(w, http.StatusOK, "dead", p)
}

func (s *server) loginPage(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Log in", "login")
	p.Data = localPath(r.URL.Query().Get("back"), "/")
	s.render(w, http.StatusOK, "login", p)
}

// templateFuncs format what the pages show. Everything they return is
// text, escaped by html/template where it lands.
var templateFuncs = template.FuncMap{
	"ago": func(d time.Duration) string { return formatDuration(d) },
	"since": func(t, now time.Time) string {
		return formatDuration(now.Sub(t))
	},
	// elapsed is how long ago a time of a row was, on the clock the row
	// was read by.
	"elapsed": func(t *time.Time, now time.Time) string {
		if t == nil {
			return "—"
		}
		return formatDuration(now.Sub(*t))
	},
	"time": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05.000 UTC")
		}
		return ""
	},
	// stime is a time in a listing, to the second; the column says UTC.
	"stime": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05")
		case *time.Time:
			if v != nil {
				return v.UTC().Format("2006-01-02 15:04:05")
			}
		}
		return "—"
	},
	"dur": func(d *time.Duration) string {
		if d == nil {
			return "—"
		}
		return formatDuration(*d)
	},
	"oneline": func(s string, n int) string {
		s = strings.Join(strings.Fields(s), " ")
		if r := []rune(s); len(r) > n {
			return string(r[:n]) + "…"
		}
		return s
	},
	"pct":    func(f float64) string { return fmt.Sprintf("%.2f%%", f*100) },
	"int64":  func(n int) int64 { return int64(n) },
	"join":   strings.Join,
	"counts": stateCounts,
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	},
	"num": func(n int64) string {
		s := strconv.FormatInt(n, 10)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				b.WriteRune('\u202f')
			}
			b.WriteRune(c)
		}
		return b.String()
	},
}

// formatDuration prints a duration to a precision that suits its size.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %02dh", int(d.Hours())/24, int(d.Hours())%24)
}
