package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSessionsExpireAndCannotBeForged(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := newAuth("the-token", time.Hour)
	v := a.newSession(now)
	id, ok := a.sessionID(v, now.Add(59*time.Minute))
	require.True(t, ok)
	require.NotEmpty(t, id)
	_, ok = a.sessionID(v, now.Add(time.Hour))
	require.False(t, ok, "a session ends at its expiry")

	// A later expiry written into the cookie breaks its MAC.
	parts := strings.Split(v, ".")
	require.Len(t, parts, 3)
	forged := parts[0] + "." + "9999999999" + "." + parts[2]
	_, ok = a.sessionID(forged, now)
	require.False(t, ok)
	for _, bad := range []string{"", "x", "a.b", "a.b.c", v + "x"} {
		_, ok = a.sessionID(bad, now)
		require.False(t, ok, "%q", bad)
	}

	// Another token's sessions and CSRF tokens mean nothing here.
	other := newAuth("another-token", time.Hour)
	_, ok = other.sessionID(v, now)
	require.False(t, ok)
	require.NotEqual(t, a.csrfToken(id), other.csrfToken(id))
	require.True(t, a.csrfOK(caller{admin: true, session: id}, a.csrfToken(id)))
	require.False(t, a.csrfOK(caller{admin: true, session: id}, other.csrfToken(id)))
	require.False(t, a.csrfOK(caller{admin: true, session: id}, ""))

	// Without a token nothing is ever accepted.
	none := newAuth("", time.Hour)
	require.False(t, none.tokenMatches(""))
	_, ok = none.sessionID(v, now)
	require.False(t, ok)
	r := httptest.NewRequest("POST", "/actions/jobs", nil)
	r.Header.Set("Authorization", "Bearer ")
	require.False(t, none.identify(r, now).admin)
	require.False(t, a.identify(r, now).admin)
	r.Header.Set("Authorization", "bearer the-token")
	require.True(t, a.identify(r, now).admin, "the scheme is case-insensitive")
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
