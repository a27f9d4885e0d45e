package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime"
)

// maxActionIDs bounds the jobs one action names, as the form's size does.
const maxActionIDs = runtime.ListLimitMax

// readOnlyReason is what a refused action says when no token is configured.
const readOnlyReason = "read-only: this dashboard was started without an admin token (--admin-token or " + AdminTokenEnv + "), so it changes nothing"

// authorize parses an action's form and says whether it may proceed; when
// it may not, the answer (403) is already written.
func (s *server) authorize(w http.ResponseWriter, r *http.Request) (caller, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		s.refuse(w, r, http.StatusBadRequest, "the form could not be read: "+err.Error())
		return caller{}, false
	}
	if !s.auth.enabled() {
		s.refuse(w, r, http.StatusForbidden, readOnlyReason)
		return caller{}, false
	}
	c := s.auth.identify(r, s.now())
	switch {
	case !c.admin && r.Header.Get("Authorization") != "":
		s.refuse(w, r, http.StatusForbidden, "the Authorization header does not carry the admin token")
		return c, false
	case c.role == roleRead:
		s.refuse(w, r, http.StatusForbidden, "the read token lets you read, not act: log in with the admin token")
		return c, false
	case !c.admin:
		s.refuse(w, r, http.StatusForbidden, "log in with the admin token to act: without it the dashboard is read-only")
		return c, false
	case !s.auth.csrfOK(c, r.PostForm.Get("csrf")):
		s.refuse(w, r, http.StatusForbidden, "the form's CSRF token is missing or belongs to another session: reload the page and try again")
		return c, false
	}
	return c, true
}

// wantsJSON is true for callers that asked for JSON: scripts using the
// Authorization header get the result as data rather than a redirect.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json") || r.Header.Get("Authorization") != ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// done answers a successful action: JSON for a script, else the page the
// form came from, with what happened as a flash.
func (s *server) done(w http.ResponseWriter, r *http.Request, result any, flash string) {
	if wantsJSON(r) {
		writeJSON(w, http.StatusOK, result)
		return
	}
	setFlash(w, flash)
	http.Redirect(w, r, localPath(r.PostForm.Get("back"), "/"), http.StatusSeeOther)
}

func (s *server) jobsAction(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r); !ok {
		return
	}
	op := r.PostForm.Get("op")
	act := map[string]func(ctx context.Context, db runtime.DB, ids ...int64) (runtime.ChangeResult, error){
		"retry": runtime.Retry, "release": runtime.Release, "cancel": runtime.Cancel, "delete": runtime.Delete,
	}[op]
	if act == nil {
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("action %q is unknown: use retry, release, cancel or delete", op))
		return
	}
	raw := r.PostForm["id"]
	if len(raw) == 0 {
		s.refuse(w, r, http.StatusBadRequest, "no job selected: tick the jobs to "+op)
		return
	}
	if len(raw) > maxActionIDs {
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("%d jobs selected: at most %d at once", len(raw), maxActionIDs))
		return
	}
	ids := make([]int64, 0, len(raw))
	for _, v := range raw {
		id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || id <= 0 {
			s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("job id %q is not a positive whole number", v))
			return
		}
		ids = append(ids, id)
	}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	res, err := act(ctx, s.pool, ids...)
	if err != nil {
		s.fail(w, r, op+" jobs", err)
		return
	}
	s.log.Info("jobs changed", zap.String("action", op), zap.Int64s("changed", res.IDs()), zap.Int("skipped", len(res.Skipped)))
	s.done(w, r, res, describeChange(op, res))
}

// describeChange says in a line what an action did and why it skipped jobs.
func describeChange(op string, res runtime.ChangeResult) string {
	past := map[string]string{"retry": "retried", "release": "released", "cancel": "cancelled", "delete": "deleted"}[op]
	var b strings.Builder
	switch n := len(res.Changed); n {
	case 0:
		fmt.Fprintf(&b, "no job %s", past)
	case 1:
		fmt.Fprintf(&b, "%s job %d", past, res.Changed[0].ID)
	default:
		fmt.Fprintf(&b, "%s %d jobs", past, n)
	}
	for _, c := range res.Changed {
		if c.RunsAt != nil && op == "release" {
			fmt.Fprintf(&b, "; job %d runs at %s, its run_at", c.ID, c.RunsAt.UTC().Format("15:04:05 UTC"))
		} else if c.RunsAt != nil {
			fmt.Fprintf(&b, "; job %d runs at %s, once its cancelled attempt's lease has ended", c.ID, c.RunsAt.UTC().Format("15:04:05 UTC"))
		}
	}
	for i, sk := range res.Skipped {
		if i == flashReasons {
			fmt.Fprintf(&b, "; and %d more jobs left alone", len(res.Skipped)-flashReasons)
			break
		}
		b.WriteString("; " + sk.Reason)
	}
	return b.String()
}

// flashReasons is how many skipped jobs a flash names, each with its
// reason: the flash is one line.
const flashReasons = 5

func (s *server) retryDeadAction(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r); !ok {
		return
	}
	f := runtime.JobFilter{State: runtime.StateDead, Kind: strings.TrimSpace(r.PostForm.Get("kind")), Queue: strings.TrimSpace(r.PostForm.Get("queue"))}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	res, err := runtime.RetryWhere(ctx, s.pool, f)
	if err != nil {
		s.fail(w, r, "retry dead jobs", err)
		return
	}
	what := "dead jobs"
	if f.Kind != "" {
		what = "dead jobs of kind " + f.Kind
	}
	s.log.Info("dead jobs retried", zap.String("kind", f.Kind), zap.String("queue", f.Queue), zap.Int("jobs", len(res.Changed)),
		zap.Int("skipped", len(res.Skipped)))
	flash := fmt.Sprintf("retried %d %s", len(res.Changed), what)
	if len(res.Skipped) > 0 {
		// The count of moved jobs heads the line; the reasons follow.
		flash += strings.TrimPrefix(describeChange("retry", runtime.ChangeResult{Skipped: res.Skipped}), "no job retried")
	}
	s.done(w, r, res, flash)
}

// deleteDeadAction deletes every dead job of a kind (or of every kind)
// and queue, as the dead jobs page asks.
func (s *server) deleteDeadAction(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r); !ok {
		return
	}
	f := runtime.JobFilter{State: runtime.StateDead, Kind: strings.TrimSpace(r.PostForm.Get("kind")), Queue: strings.TrimSpace(r.PostForm.Get("queue"))}
	ctx, cancel := s.queryContext(r)
	defer cancel()
	res, err := runtime.DeleteWhere(ctx, s.pool, f)
	if err != nil {
		s.fail(w, r, "delete dead jobs", err)
		return
	}
	what := "dead jobs"
	if f.Kind != "" {
		what = "dead jobs of kind " + f.Kind
	}
	if f.Queue != "" {
		what += " in queue " + f.Queue
	}
	s.log.Info("dead jobs deleted", zap.String("kind", f.Kind), zap.String("queue", f.Queue), zap.Int("jobs", len(res.Changed)),
		zap.Int("skipped", len(res.Skipped)))
	flash := fmt.Sprintf("deleted %d %s", len(res.Changed), what)
	if len(res.Skipped) > 0 {
		flash += strings.TrimPrefix(describeChange("delete", runtime.ChangeResult{Skipped: res.Skipped}), "no job deleted")
	}
	// The page of a kind whose dead jobs are all gone is empty: go to all.
	if back := r.PostForm.Get("back"); strings.HasPrefix(back, "/dead") && len(res.Skipped) == 0 {
		r.PostForm.Set("back", "/dead")
	}
	s.done(w, r, res, flash)
}

func (s *server) queueAction(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r); !ok {
		return
	}
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	ctx, cancel := s.queryContext(r)
	defer cancel()
	var flash string
	switch op := r.PostForm.Get("op"); op {
	case "pause":
		if err := runtime.PauseQueue(ctx, s.pool, queue); err != nil {
			s.refuse(w, r, http.StatusBadRequest, err.Error())
			return
		}
		flash = fmt.Sprintf("paused queue %s: its pending jobs wait, running ones finish", queue)
	case "resume":
		was, err := runtime.ResumeQueue(ctx, s.pool, queue)
		if err != nil {
			s.refuse(w, r, http.StatusBadRequest, err.Error())
			return
		}
		flash = fmt.Sprintf("resumed queue %s", queue)
		if !was {
			flash = fmt.Sprintf("queue %s was not paused", queue)
		}
	default:
		s.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("queue action %q is unknown: use pause or resume", op))
		return
	}
	s.log.Info("queue changed", zap.String("queue", queue), zap.String("action", r.PostForm.Get("op")))
	s.done(w, r, map[string]string{"queue": queue, "result": flash}, flash)
}

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.refuse(w, r, http.StatusBadRequest, "the form could not be read: "+err.Error())
		return
	}
	if !s.auth.tokens() {
		s.refuse(w, r, http.StatusForbidden, readOnlyReason)
		return
	}
	back := localPath(r.PostForm.Get("back"), "/")
	now, key := s.now(), clientKey(r)
	// A refused address is not told whether its token is right.
	if wait := s.auth.throttle.wait(key, now); wait > 0 {
		s.throttled(w, r, wait)
		return
	}
	ro := s.auth.match(r.PostForm.Get("token"))
	if ro == roleNone {
		wait := s.auth.throttle.fail(key, now)
		s.log.Warn("login refused: wrong token", zap.String("remote_addr", r.RemoteAddr), zap.Duration("refused_for", wait))
		p := s.newPage(w, r, "Log in", "login")
		p.Data = back
		p.Flash = "that is not the admin token"
		if s.auth.read != nil {
			p.Flash = "that is neither the admin nor the read token"
		}
		if wait > 0 {
			p.Flash += fmt.Sprintf("; too many wrong tokens from your address: try again in %d s", max(int(wait.Round(time.Second)/time.Second), 1))
			w.Header().Set("Retry-After", strconv.Itoa(max(int(wait.Round(time.Second)/time.Second), 1)))
		}
		s.render(w, http.StatusForbidden, "login", p)
		return
	}
	s.auth.throttle.forgive(key)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.auth.newSession(now, ro), Path: "/",
		MaxAge: int(s.opts.SessionTTL.Seconds()), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	s.log.Info("logged in", zap.String("remote_addr", r.RemoteAddr), zap.String("role", roleNames[ro]))
	if ro == roleAdmin {
		setFlash(w, "logged in: actions are enabled")
	} else {
		setFlash(w, "logged in to read")
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	setFlash(w, "logged out")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
