package ui

import (
	"context"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of Options.
const (
	SessionTTLDefault          = 12 * time.Hour
	QueryTimeoutDefault        = 10 * time.Second
	PayloadPreviewBytesDefault = 64 << 10
	PayloadPreviewDepthDefault = 20
)

// Bounds of what one request may make the dashboard hold or do.
const (
	// downloadsMax is how many raw payloads are streamed at once; another
	// download is answered 503 meanwhile. Each holds a connection of the
	// pool while the browser reads.
	downloadsMax = 2
	// downloadTimeout bounds one download, which streams at the pace the
	// browser reads.
	downloadTimeout = 10 * time.Minute
)

// AdminTokenEnv and ReadTokenEnv are the environment variables `fila ui`
// and `fila work --ui-addr` read the tokens from when no flag gives them:
// a flag shows in the process list, the environment does not.
const (
	AdminTokenEnv = "FILA_UI_ADMIN_TOKEN"
	ReadTokenEnv  = "FILA_UI_READ_TOKEN"
)

// Options configures the dashboard.
type Options struct {
	// AdminToken allows reading and actions (retry, cancel, delete, pause,
	// resume) to whoever presents it: on the login form, which sets a
	// session cookie, or as "Authorization: Bearer <token>". Empty makes
	// the dashboard read-only: every action answers 403. At least
	// TokenMinLen characters. Defaults to empty.
	AdminToken string
	// ReadToken allows reading every page, payloads included, and nothing
	// else, presented as AdminToken is. At least TokenMinLen characters,
	// and not the admin token. Defaults to empty.
	ReadToken string
	// PublicRead lets anyone who reaches the dashboard read its pages,
	// payloads included, without a token. With a token set and PublicRead
	// false, every page but the login form needs a session or a token.
	// Without any token there is nothing to check, and every page is
	// public: keep such a dashboard on a private address. Defaults to
	// false.
	PublicRead bool
	// SessionTTL is how long a login lasts. Defaults to SessionTTLDefault.
	SessionTTL time.Duration
	// QueryTimeout bounds the database work behind one request, so a
	// search that no index serves well ends with a message rather than
	// holding a connection. Defaults to QueryTimeoutDefault.
	QueryTimeout time.Duration
	// PayloadPreviewBytes is the most bytes of a payload's indented JSON
	// a job page shows; the page links to the whole payload, streamed as a
	// download. The page reads twice as many bytes of the payload, and no
	// more, whatever its size. Defaults to PayloadPreviewBytesDefault.
	PayloadPreviewBytes int
	// PayloadPreviewDepth is how many levels of a payload's arrays and
	// objects a job page shows; deeper ones are shown as […] and {…}.
	// Defaults to PayloadPreviewDepthDefault.
	PayloadPreviewDepth int
}

// server is the dashboard's HTTP handler.
type server struct {
	pool  *pgxpool.Pool
	opts  Options
	log   *zap.Logger
	auth  *auth
	pages map[string]*template.Template
	mux   *http.ServeMux
	// now is the clock of sessions; tests may replace it.
	now func() time.Time
	// downloads holds a token per payload being streamed.
	downloads chan struct{}
}

// New returns the dashboard as an http.Handler reading and changing the
// jobs of pool's database, which may be reached through PgBouncer in
// transaction mode. A nil logger logs nothing.
func New(pool *pgxpool.Pool, opts Options, logger *zap.Logger) (http.Handler, error) {
	if pool == nil {
		return nil, errors.New("ui: no database pool")
	}
	if opts.SessionTTL < 0 || opts.QueryTimeout < 0 {
		return nil, fmt.Errorf("ui: SessionTTL %s and QueryTimeout %s must not be negative", opts.SessionTTL, opts.QueryTimeout)
	}
	if opts.PayloadPreviewBytes < 0 || opts.PayloadPreviewDepth < 0 {
		return nil, fmt.Errorf("ui: PayloadPreviewBytes %d and PayloadPreviewDepth %d must not be negative", opts.PayloadPreviewBytes, opts.PayloadPreviewDepth)
	}
	if opts.PayloadPreviewBytes == 0 {
		opts.PayloadPreviewBytes = PayloadPreviewBytesDefault
	}
	if opts.PayloadPreviewDepth == 0 {
		opts.PayloadPreviewDepth = PayloadPreviewDepthDefault
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = SessionTTLDefault
	}
	if opts.QueryTimeout == 0 {
		opts.QueryTimeout = QueryTimeoutDefault
	}
	for _, tok := range []struct{ name, value string }{{"AdminToken", opts.AdminToken}, {"ReadToken", opts.ReadToken}} {
		if tok.value != "" && len(tok.value) < TokenMinLen {
			chars := "characters"
			if len(tok.value) == 1 {
				chars = "character"
			}
			return nil, fmt.Errorf("ui: %s is %d %s long: at least %d are needed (such as openssl rand -hex 16)", tok.name, len(tok.value), chars, TokenMinLen)
		}
	}
	if opts.ReadToken != "" && opts.ReadToken == opts.AdminToken {
		return nil, errors.New("ui: ReadToken is the admin token: give readers a token of their own")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &server{pool: pool, opts: opts, log: logger.Named("ui"), auth: newAuth(opts.AdminToken, opts.ReadToken, opts.PublicRead, opts.SessionTTL),
		pages: map[string]*template.Template{}, mux: http.NewServeMux(), now: time.Now,
		downloads: make(chan struct{}, downloadsMax)}
	for _, name := range []string{"overview", "jobs", "job", "dead", "workflows", "workflow", "login", "message"} {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(templateFS, "templates/layout.html", "templates/jobrows.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	s.routes(http.FileServerFS(static))
	return s, nil
}

func (s *server) routes(static http.Handler) {
	// Every state-changing route is a POST behind the cross-origin check
	// (Sec-Fetch-Site, or Origin against Host), and the action routes also
	// want the admin's session with its CSRF token, or the token itself in
	// a header.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refuse(w, r, http.StatusForbidden, "cross-origin request refused: actions are accepted only from the dashboard's own pages")
	}))
	post := func(pattern string, h http.HandlerFunc) { s.mux.Handle("POST "+pattern, cop.Handler(h)) }

	s.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(static)))
	s.mux.HandleFunc("GET /{$}", s.overviewPage)
	s.mux.HandleFunc("GET /jobs", s.jobsPage)
	s.mux.HandleFunc("GET /jobs/{id}", s.jobPage)
	s.mux.HandleFunc("GET /jobs/{id}/payload", s.payloadDownload)
	s.mux.HandleFunc("GET /dead", s.deadPage)
	s.mux.HandleFunc("GET /workflows", s.workflowsPage)
	s.mux.HandleFunc("GET /workflows/{id}", s.workflowPage)
	s.mux.HandleFunc("GET /login", s.loginPage)
	post("/login", s.login)
	post("/logout", s.logout)
	post("/actions/jobs", s.jobsAction)
	post("/actions/retry-dead", s.retryDeadAction)
	post("/actions/delete-dead", s.deleteDeadAction)
	post("/actions/queues", s.queueAction)
	post("/actions/workflows", s.workflowAction)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Pages show job data: never cached, never framed by another site.
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	if !s.admit(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// admit answers, and returns false for, a request that may not go on: a
// token in an Authorization header from an address the throttle refuses,
// or a wrong one; a page read without a session or token when reading
// needs one (a browser is sent to the login form). The login form, its
// assets and every POST go on: each POST route checks for itself.
func (s *server) admit(w http.ResponseWriter, r *http.Request) bool {
	now := s.now()
	if r.Header.Get("Authorization") != "" {
		key := clientKey(r)
		if wait := s.auth.throttle.wait(key, now); wait > 0 {
			s.throttled(w, r, wait)
			return false
		}
		if c := s.auth.identify(r, now); c.badHeader {
			if wait := s.auth.throttle.fail(key, now); wait > 0 {
				s.log.Warn("token guesses throttled", zap.String("remote_addr", r.RemoteAddr), zap.Duration("for", wait))
			}
		} else {
			s.auth.throttle.forgive(key)
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return true
	}
	if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
		return true
	}
	c := s.auth.identify(r, now)
	if s.auth.canRead(c) {
		return true
	}
	if c.badHeader || wantsJSON(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": unreadableReason})
		return false
	}
	http.Redirect(w, r, "/login?back="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	return false
}

// unreadableReason is what a refused read says.
const unreadableReason = "log in with the read or admin token to read this dashboard (or send it as Authorization: Bearer <token>)"

// throttled answers a request from an address that gave too many wrong
// tokens: 429, and when to try again.
func (s *server) throttled(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := int(wait.Round(time.Second) / time.Second)
	secs = max(secs, 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	msg := fmt.Sprintf("too many wrong tokens from your address: try again in %d s", secs)
	if wantsJSON(r) {
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": msg})
		return
	}
	s.message(w, r, http.StatusTooManyRequests, "Too many attempts", msg)
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// page is what every template receives.
type page struct {
	Title string
	Nav   string
	// ReadOnly is true when the dashboard has no admin token at all.
	ReadOnly bool
	// Tokens is true when there is a token to log in with: an admin or a
	// read token.
	Tokens bool
	// Admin is true when this request may act; CSRF is then its token.
	Admin bool
	CSRF  string
	// Reader is true for a session of the read token.
	Reader bool
	// Here is the request's path and query, where an action returns to.
	Here  string
	Flash string
	Data  any
}

func (s *server) newPage(w http.ResponseWriter, r *http.Request, title, nav string) page {
	c := s.auth.identify(r, s.now())
	p := page{Title: title, Nav: nav, ReadOnly: !s.auth.enabled(), Tokens: s.auth.tokens(), Admin: c.admin,
		Reader: c.role == roleRead, Here: r.URL.RequestURI()}
	if c.session != "" && c.admin {
		p.CSRF = s.auth.csrfToken(c.session)
	}
	p.Flash = takeFlash(w, r)
	return p
}

func (s *server) render(w http.ResponseWriter, status int, name string, p page) {
	var b strings.Builder
	if err := s.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		s.log.Error("render page", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be drawn: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows an error that stopped a page: a database that does not
// answer, a search that took too long.
func (s *server) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	msg := fmt.Sprintf("%s: %v", what, err)
	status := http.StatusInternalServerError
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("%s took longer than %s and was stopped; narrow it (a state makes any search use an index)", what, s.opts.QueryTimeout)
		status = http.StatusServiceUnavailable
	}
	s.log.Warn("page failed", zap.String("path", r.URL.Path), zap.Error(err))
	s.message(w, r, status, "Error", msg)
}

// refuse answers a request that may not do what it asks.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.log.Info("action refused", zap.String("path", r.URL.Path), zap.Int("status", status), zap.String("reason", msg))
	if wantsJSON(r) {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	s.message(w, r, status, "Refused", msg)
}

func (s *server) message(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	p := s.newPage(w, r, title, "")
	p.Data = msg
	s.render(w, status, "message", p)
}

// queryContext bounds the database work of one request.
func (s *server) queryContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.QueryTimeout)
}

// The flash is one line shown on the next page after an action: it lives
// in a cookie for the redirect, and the template escapes it like any text.
const flashCookie = "fila_ui_flash"

func setFlash(w http.ResponseWriter, msg string) {
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(msg)),
		Path: "/", MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return string(b)
}

// localPath returns back if it is a path on this server, else fallback: a
// form's return address never sends the browser elsewhere.
func localPath(back, fallback string) string {
	u, err := url.Parse(back)
	if err != nil || back == "" || u.IsAbs() || u.Host != "" || !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.Contains(back, `\`) {
		return fallback
	}
	return back
}
