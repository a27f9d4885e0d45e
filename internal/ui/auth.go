package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Who may read and who may act. The tokens are the only secrets: a session
// cookie and its CSRF token are MACs under a key derived from them, so
// nothing is stored on the server, several dashboards started with the
// same tokens accept each other's sessions, and changing a token ends
// every session at once.

// sessionCookie names the cookie that holds a logged-in session.
const sessionCookie = "fila_ui_session"

// TokenMinLen is the shortest admin or read token the dashboard accepts:
// 16 characters chosen at random (openssl rand -hex 16 gives 32) are out
// of reach of guessing, even more so at the pace the login throttle allows.
const TokenMinLen = 16

// role is what a caller may do.
type role int

const (
	roleNone  role = iota
	roleRead       // read every page
	roleAdmin      // read, and act
)

// auth checks the tokens, sessions and CSRF tokens. Without an admin
// token it refuses every action; without any token every page is public.
type auth struct {
	admin []byte // sha256 of the admin token; nil when none
	read  []byte // sha256 of the read token; nil when none
	// public is true when reading needs no token: there is none, or
	// Options.PublicRead says so.
	public bool
	key    []byte // MAC key of sessions and CSRF tokens
	ttl    time.Duration
	// throttle slows down guessing, per client address.
	throttle *throttle
}

func newAuth(adminToken, readToken string, publicRead bool, ttl time.Duration) *auth {
	a := &auth{ttl: ttl, public: publicRead || (adminToken == "" && readToken == ""), throttle: newThrottle()}
	if adminToken != "" {
		sum := sha256.Sum256([]byte(adminToken))
		a.admin = sum[:]
	}
	if readToken != "" {
		sum := sha256.Sum256([]byte(readToken))
		a.read = sum[:]
	}
	mac := hmac.New(sha256.New, []byte(adminToken+"\x00"+readToken))
	mac.Write([]byte("fila-ui session key"))
	a.key = mac.Sum(nil)
	return a
}

// enabled reports whether actions can be allowed at all.
func (a *auth) enabled() bool { return a.admin != nil }

// tokens reports whether there is any token to log in with.
func (a *auth) tokens() bool { return a.admin != nil || a.read != nil }

// match returns what a presented token allows, comparing in constant
// time. Both sides are hashed first, so neither the comparison's time nor
// an early exit on length tells anything about a token.
func (a *auth) match(presented string) role {
	if presented == "" {
		return roleNone
	}
	sum := sha256.Sum256([]byte(presented))
	admin := a.admin != nil && subtle.ConstantTimeCompare(sum[:], a.admin) == 1
	read := a.read != nil && subtle.ConstantTimeCompare(sum[:], a.read) == 1
	switch {
	case admin:
		return roleAdmin
	case read:
		return roleRead
	}
	return roleNone
}

// tokenMatches reports whether presented is the admin token.
func (a *auth) tokenMatches(presented string) bool { return a.match(presented) == roleAdmin }

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(strings.Join(parts, "|")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// roleNames spell a session's role in its cookie.
var roleNames = map[role]string{roleRead: "read", roleAdmin: "admin"}

// newSession returns a session cookie value: a random id, its expiry in
// Unix seconds, its role, and their MAC.
func (a *auth) newSession(now time.Time, r role) string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	exp := strconv.FormatInt(now.Add(a.ttl).Unix(), 10)
	name := roleNames[r]
	return id + "." + exp + "." + name + "." + a.mac("session", id, exp, name)
}

// session returns the id and role of a valid, unexpired session cookie
// value.
func (a *auth) session(value string, now time.Time) (string, role, bool) {
	if !a.tokens() {
		return "", roleNone, false
	}
	parts := strings.Split(value, ".")
	if len(parts) != 4 {
		return "", roleNone, false
	}
	id, exp, name, sig := parts[0], parts[1], parts[2], parts[3]
	if !hmac.Equal([]byte(sig), []byte(a.mac("session", id, exp, name))) {
		return "", roleNone, false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return "", roleNone, false
	}
	switch name {
	case "admin":
		if a.enabled() {
			return id, roleAdmin, true
		}
	case "read":
		return id, roleRead, true
	}
	return "", roleNone, false
}

// sessionID returns the id of a valid, unexpired session cookie value.
func (a *auth) sessionID(value string, now time.Time) (string, bool) {
	id, _, ok := a.session(value, now)
	return id, ok
}

// csrfToken is the CSRF token of a session: forms of that session carry it,
// and an action is accepted only with it.
func (a *auth) csrfToken(sessionID string) string { return a.mac("csrf", sessionID) }

// caller is who made a request.
type caller struct {
	role role
	// admin is true for an admin session or the admin token in an
	// Authorization header.
	admin bool
	// session is the session id behind the cookie; "" for a header.
	session string
	// viaHeader is true when the token came in the Authorization header:
	// a browser never adds that header to a cross-site request by itself,
	// so such a request needs no CSRF token.
	viaHeader bool
	// badHeader is true when an Authorization header carried no token of
	// this dashboard: a guess, which the throttle counts.
	badHeader bool
}

// identify reads the request's credentials.
func (a *auth) identify(r *http.Request, now time.Time) caller {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			if ro := a.match(strings.TrimSpace(tok)); ro != roleNone {
				return caller{role: ro, admin: ro == roleAdmin, viaHeader: true}
			}
		}
		return caller{badHeader: true}
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return caller{}
	}
	if id, ro, ok := a.session(c.Value, now); ok {
		return caller{role: ro, admin: ro == roleAdmin, session: id}
	}
	return caller{}
}

// canRead reports whether c may see the pages.
func (a *auth) canRead(c caller) bool { return a.public || c.role >= roleRead }

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

// Throttling of wrong tokens, per client address: the first throttleFree
// failures are answered at once (a typo, a stale bookmark); after that
// each failure refuses the address, without looking at what it sends, for
// throttleBase doubled per further failure, up to throttleMax. A success
// forgives the address; so do throttleForget minutes without a failure.
// An IPv6 client is counted by its /64, which one host can fill with
// addresses of its own. Behind a reverse proxy every client has the
// proxy's address, and shares its count.
const (
	throttleFree      = 5
	throttleBase      = time.Second
	throttleMax       = 5 * time.Minute
	throttleForget    = 15 * time.Minute
	throttleAddresses = 10000
	// throttleOverflow counts together the addresses that find the table
	// full: a flood of addresses shares one count rather than growing it.
	throttleOverflow = "(others)"
)

type throttle struct {
	mu sync.Mutex
	m  map[string]*strikes
}

// strikes are one address's recent failures.
type strikes struct {
	n     int
	last  time.Time // of the last failure
	until time.Time // refused until then
}

func newThrottle() *throttle { return &throttle{m: map[string]*strikes{}} }

// clientKey is the address a request is counted under.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// wait returns how long key is still refused; 0 when it may try.
func (t *throttle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		if len(t.m) >= throttleAddresses {
			s = t.m[throttleOverflow]
		}
		if s == nil {
			return 0
		}
	}
	return max(s.until.Sub(now), 0)
}

// fail counts a wrong token from key and returns how long key is refused
// now.
func (t *throttle) fail(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[key]
	if s == nil {
		if len(t.m) >= throttleAddresses {
			t.sweep(now)
		}
		if len(t.m) >= throttleAddresses {
			key = throttleOverflow
			s = t.m[key]
		}
		if s == nil {
			s = &strikes{}
			t.m[key] = s
		}
	}
	if now.Sub(s.last) > throttleForget {
		s.n = 0
	}
	s.n++
	s.last = now
	if s.n > throttleFree {
		backoff := throttleMax
		if shift := s.n - throttleFree - 1; shift < 20 {
			backoff = min(throttleBase<<shift, throttleMax)
		}
		s.until = now.Add(backoff)
	}
	return max(s.until.Sub(now), 0)
}

// forgive forgets key's failures, after it presented a good token.
func (t *throttle) forgive(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

// sweep drops the addresses whose failures are forgotten. t.mu is held.
func (t *throttle) sweep(now time.Time) {
	for k, s := range t.m {
		if now.Sub(s.last) > throttleForget && !now.Before(s.until) {
			delete(t.m, k)
		}
	}
}
