package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Who may act. The admin token is the only secret: a session cookie and its
// CSRF token are MACs under a key derived from it, so nothing is stored on
// the server, several dashboards started with the same token accept each
// other's sessions, and changing the token ends every session at once.

// sessionCookie names the cookie that holds a logged-in session.
const sessionCookie = "fila_ui_session"

// auth checks the admin token, sessions and CSRF tokens. Its zero value
// (no token) refuses every action.
type auth struct {
	token []byte // sha256 of the admin token; nil when read-only
	key   []byte // MAC key of sessions and CSRF tokens
	ttl   time.Duration
}

func newAuth(token string, ttl time.Duration) *auth {
	if token == "" {
		return &auth{ttl: ttl}
	}
	sum := sha256.Sum256([]byte(token))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("fila-ui session key"))
	return &auth{token: sum[:], key: mac.Sum(nil), ttl: ttl}
}

// enabled reports whether actions can be allowed at all.
func (a *auth) enabled() bool { return a.token != nil }

// tokenMatches compares a presented token with the admin token in constant
// time. Both sides are hashed first, so neither the comparison's time nor
// an early exit on length tells anything about the token.
func (a *auth) tokenMatches(presented string) bool {
	if !a.enabled() || presented == "" {
		return false
	}
	sum := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(sum[:], a.token) == 1
}

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "|")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie value: a random id, its expiry in
// Unix seconds, and their MAC.
func (a *auth) newSession(now time.Time) string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	exp := strconv.FormatInt(now.Add(a.ttl).Unix(), 10)
	return id + "." + exp + "." + a.mac("session", id, exp)
}

// sessionID returns the id of a valid, unexpired session cookie value.
func (a *auth) sessionID(value string, now time.Time) (string, bool) {
	if !a.enabled() {
		return "", false
	}
	id, rest, ok := strings.Cut(value, ".")
	if !ok {
		return "", false
	}
	exp, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if !hmac.Equal([]byte(sig), []byte(a.mac("session", id, exp))) {
		return "", false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return "", false
	}
	return id, true
}

// csrfToken is the CSRF token of a session: forms of that session carry it,
// and an action is accepted only with it.
func (a *auth) csrfToken(sessionID string) string { return a.mac("csrf", sessionID) }

// caller is who made a request, as far as actions are concerned.
type caller struct {
	// admin is true for a valid session cookie or the admin token in an
	// Authorization header.
	admin bool
	// session is the session id behind the cookie; "" for a header.
	session string
	// viaHeader is true when the token came in the Authorization header:
	// a browser never adds that header to a cross-site request by itself,
	// so such a request needs no CSRF token.
	viaHeader bool
}

// identify reads the request's credentials.
func (a *auth) identify(r *http.Request, now time.Time) caller {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") && a.tokenMatches(strings.TrimSpace(tok)) {
			return caller{admin: true, viaHeader: true}
		}
		return caller{}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return caller{}
	}
	if id, ok := a.sessionID(c.Value, now); ok {
		return caller{admin: true, session: id}
	}
	return caller{}
}

// csrfOK reports whether an action request carries its session's CSRF token.
func (a *auth) csrfOK(c caller, presented string) bool {
	if c.viaHeader {
		return true
	}
	if c.session == "" || presented == "" {
		return false
	}
	return hmac.Equal([]byte(presented), []byte(a.csrfToken(c.session)))
}
