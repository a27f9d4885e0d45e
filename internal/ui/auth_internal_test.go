package ui

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionsExpireAndCannotBeForged(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newAuth("the-admin-token-0001", "the-read-token-00001", false, time.Hour)
	v := a.newSession(now, roleAdmin)
	id, ro, ok := a.session(v, now.Add(59*time.Minute))
	require.True(t, ok)
	require.Equal(t, roleAdmin, ro)
	require.NotEmpty(t, id)
	_, ok = a.sessionID(v, now.Add(time.Hour))
	require.False(t, ok, "a session ends at its expiry")

	// A later expiry, or another role, written into the cookie breaks its
	// MAC.
	parts := strings.Split(v, ".")
	require.Len(t, parts, 4)
	forged := parts[0] + "." + "9999999999" + "." + parts[2] + "." + parts[3]
	_, ok = a.sessionID(forged, now)
	require.False(t, ok)
	reader := a.newSession(now, roleRead)
	_, ro, ok = a.session(reader, now)
	require.True(t, ok)
	require.Equal(t, roleRead, ro)
	rp := strings.Split(reader, ".")
	_, _, ok = a.session(rp[0]+"."+rp[1]+".admin."+rp[3], now)
	require.False(t, ok, "a read session cannot be made an admin one")
	for _, bad := range []string{"", "x", "a.b", "a.b.c", "a.b.c.d", v + "x"} {
		_, ok = a.sessionID(bad, now)
		require.False(t, ok, "%q", bad)
	}

	// Other tokens' sessions and CSRF tokens mean nothing here, and
	// changing either token ends every session.
	other := newAuth("another-admin-token1", "the-read-token-00001", false, time.Hour)
	_, ok = other.sessionID(v, now)
	require.False(t, ok)
	_, ok = newAuth("the-admin-token-0001", "another-read-token-1", false, time.Hour).sessionID(v, now)
	require.False(t, ok)
	require.NotEqual(t, a.csrfToken(id), other.csrfToken(id))
	require.True(t, a.csrfOK(caller{admin: true, session: id}, a.csrfToken(id)))
	require.False(t, a.csrfOK(caller{admin: true, session: id}, other.csrfToken(id)))
	require.False(t, a.csrfOK(caller{admin: true, session: id}, ""))

	// Without a token nothing is ever accepted, and every page is public.
	none := newAuth("", "", false, time.Hour)
	require.True(t, none.public)
	require.False(t, none.tokenMatches(""))
	_, ok = none.sessionID(v, now)
	require.False(t, ok)
	r := httptest.NewRequest("POST", "/actions/jobs", nil)
	r.Header.Set("Authorization", "Bearer ")
	require.False(t, none.identify(r, now).admin)
	require.False(t, a.identify(r, now).admin)
	require.True(t, a.identify(r, now).badHeader)
	r.Header.Set("Authorization", "bearer the-admin-token-0001")
	require.True(t, a.identify(r, now).admin, "the scheme is case-insensitive")
	r.Header.Set("Authorization", "Bearer the-read-token-00001")
	c := a.identify(r, now)
	require.False(t, c.admin)
	require.Equal(t, roleRead, c.role)
	require.True(t, a.canRead(c))
	require.False(t, a.canRead(caller{}))
	require.True(t, newAuth("the-admin-token-0001", "", true, time.Hour).canRead(caller{}), "PublicRead")
}

// TestThrottleBacksOff: five wrong tokens are answered at once; then each
// refuses the address for a second, doubled per failure up to five
// minutes; a success or fifteen quiet minutes forgive it.
func TestThrottleBacksOff(t *testing.T) {
	t.Parallel()
	th := newThrottle()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for range throttleFree {
		require.Zero(t, th.fail("203.0.113.9", now))
		require.Zero(t, th.wait("203.0.113.9", now))
	}
	require.Equal(t, time.Second, th.fail("203.0.113.9", now))
	require.Equal(t, time.Second, th.wait("203.0.113.9", now))
	require.Zero(t, th.wait("198.51.100.1", now), "another address is not held back")
	now = now.Add(time.Second)
	require.Zero(t, th.wait("203.0.113.9", now))
	require.Equal(t, 2*time.Second, th.fail("203.0.113.9", now))
	for range 20 {
		now = now.Add(throttleMax)
		th.fail("203.0.113.9", now)
	}
	require.Equal(t, throttleMax, th.wait("203.0.113.9", now), "capped")
	th.forgive("203.0.113.9")
	require.Zero(t, th.wait("203.0.113.9", now))
	for range throttleFree + 1 {
		th.fail("203.0.113.9", now)
	}
	require.Equal(t, time.Second, th.wait("203.0.113.9", now))
	now = now.Add(throttleForget + time.Second)
	require.Zero(t, th.fail("203.0.113.9", now), "forgotten after a quiet while")

	// A full table counts newcomers together, and never grows past it.
	full := newThrottle()
	for i := range throttleAddresses {
		full.fail(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), now)
	}
	for i := range throttleFree + 1 {
		full.fail(fmt.Sprintf("192.0.2.%d", i), now)
	}
	require.LessOrEqual(t, len(full.m), throttleAddresses+1)
	require.Equal(t, time.Second, full.wait("192.0.2.200", now), "newcomers share the overflow's count")

	// IPv6 clients are counted by their /64.
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "[2001:db8:1:2:aaaa::1]:5555"
	require.Equal(t, "2001:db8:1:2::/64", clientKey(r))
	r.RemoteAddr = "192.0.2.7:80"
	require.Equal(t, "192.0.2.7", clientKey(r))
}

func TestLocalPathKeepsActionsOnThisServer(t *testing.T) {
	t.Parallel()
	for back, want := range map[string]string{
		"/dead?kind=x":          "/dead?kind=x",
		"/jobs/12":              "/jobs/12",
		"":                      "/",
		"//evil.example/":       "/",
		"https://evil.example/": "/",
		`/\evil.example`:        "/",
		"jobs":                  "/",
	} {
		require.Equal(t, want, localPath(back, "/"), back)
	}
}

func TestNiceCeilAndFormats(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 7: 10, 11: 20, 380: 500, 1001: 2000} {
		require.InDelta(t, want, niceCeil(v), 1e-9, "%v", v)
	}
	for ms, want := range map[float64]string{0: "0", 0.5: "0.5 ms", 1: "1 ms", 2.5: "2.5 ms", 10: "10 ms", 1000: "1 s", 1500: "1.5 s", 90_000: "1.5 min"} {
		require.Equal(t, want, formatMs(ms), "%v", ms)
	}
}
