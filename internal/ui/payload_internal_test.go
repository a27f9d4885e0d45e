package ui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestDownloadsAreBounded: while downloadsMax payloads stream, another
// download is refused at once rather than holding one more connection.
func TestDownloadsAreBounded(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	h, err := New(pool, Options{}, nil)
	require.NoError(t, err)
	s := h.(*server)
	for range downloadsMax {
		s.downloads <- struct{}{}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/jobs/1/payload", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "10", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "being downloaded already")
}

// TestLoginThrottleOnTheClock: the free wrong tokens, the refusal that
// follows, its end, and a success forgiving the address, on a clock the
// test moves.
func TestLoginThrottleOnTheClock(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	const token = "the-admin-token-for-clock"
	h, err := New(pool, Options{AdminToken: token}, nil)
	require.NoError(t, err)
	s := h.(*server)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return now }
	try := func(tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.RemoteAddr = "203.0.113.9:40000"
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		return rec
	}
	for range throttleFree {
		require.Equal(t, http.StatusForbidden, try("wrong-token-wrong-token").Code)
	}
	rec := try("wrong-token-wrong-token")
	require.Equal(t, http.StatusForbidden, rec.Code, "the sixth is checked, and starts the refusal")
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "try again in 1 s")
	require.Equal(t, http.StatusTooManyRequests, try(token).Code, "refused unchecked, the right token too")
	now = now.Add(time.Second)
	rec = try("wrong-token-wrong-token")
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Equal(t, "2", rec.Header().Get("Retry-After"), "doubled")
	now = now.Add(2 * time.Second)
	require.Equal(t, http.StatusSeeOther, try(token).Code, "the right token after the wait")
	require.Equal(t, http.StatusForbidden, try("wrong-token-wrong-token").Code, "a success forgives the address")
}
