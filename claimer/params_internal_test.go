package claimer

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// TestAttemptParamsEncode: the arrays naming a batch of attempts encode to
// what PostgreSQL decodes as the same ids, attempt numbers and start times,
// without an allocation per element (a []int64 or []time.Time parameter
// cost 2.5 a job).
//
// Not parallel: testing.AllocsPerRun refuses to run beside other tests.
func TestAttemptParamsEncode(t *testing.T) {
	const n = 1000
	as := make([]Attempt, n)
	base := time.Date(2026, 12, 5, 1, 2, 3, 456789000, time.UTC)
	for i := range as {
		as[i] = Attempt{ID: int64(1_000_000 + i), Attempt: 1 + i%3, StartedAt: base.Add(time.Duration(i) * time.Microsecond)}
	}
	p := split(as)
	m := pgtype.NewMap()

	var (
		ids      []int64
		attempts []int32
		started  []time.Time
	)
	for _, c := range []struct {
		oid uint32
		val any
		dst any
	}{
		{pgtype.Int8ArrayOID, p.ids, &ids},
		{pgtype.Int4ArrayOID, p.attempts, &attempts},
		{pgtype.TimestamptzArrayOID, p.started, &started},
	} {
		buf, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.val, nil)
		require.NoError(t, err)
		require.NoError(t, m.Scan(c.oid, pgtype.BinaryFormatCode, buf, c.dst))
	}
	require.Len(t, ids, n)
	for i, a := range as {
		require.Equal(t, a.ID, ids[i])
		require.Equal(t, int32(a.Attempt), attempts[i])
		require.True(t, a.StartedAt.Equal(started[i]), "start time %d: %v, want %v", i, started[i], a.StartedAt)
	}

	buf := make([]byte, 0, 64<<10)
	for name, c := range map[string]struct {
		oid uint32
		val any
	}{"ids": {pgtype.Int8ArrayOID, p.ids}, "start times": {pgtype.TimestamptzArrayOID, p.started}} {
		allocs := testing.AllocsPerRun(10, func() {
			_, _ = m.Encode(c.oid, pgtype.BinaryFormatCode, c.val, buf[:0])
		})
		require.Less(t, allocs, 10.0, "encoding %d %s allocated %.0f times", n, name, allocs)
	}

	// The types pgx finds by the Go value alone, as it must when no
	// statement description gives them (statements through a pooler).
	for _, v := range []any{p.ids, p.started} {
		_, ok := m.TypeForValue(v)
		require.True(t, ok, "pgx knows no PostgreSQL type for %T", v)
	}
}
