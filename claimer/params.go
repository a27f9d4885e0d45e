package claimer

import (
	"github.com/jackc/pgx/v5/pgtype"
)

// attemptParams are the three arrays that name attempts in a statement's
// parameters: job ids, attempt numbers and attempt start times.
//
// The ids and start times are arrays of pointers: given a []int64 or
// []time.Time, pgx boxes each element into an interface to encode it, an
// allocation per element (two for a time), some 2.5 allocations per job
// of a drain's completion writes. An interface holds a pointer without
// allocating, and pgx encodes *pgtype.Int8 and *pgtype.Timestamptz
// directly. Both are types pgx knows by their Go type, which it needs when
// no statement description gives the parameters' types (the statements
// sent through a pooler).
type attemptParams struct {
	ids      pgtype.FlatArray[*pgtype.Int8]
	attempts []int32
	started  pgtype.FlatArray[*pgtype.Timestamptz]
}

func newAttemptParams(n int) attemptParams {
	ids, started := make([]pgtype.Int8, n), make([]pgtype.Timestamptz, n)
	p := attemptParams{ids: make(pgtype.FlatArray[*pgtype.Int8], n), attempts: make([]int32, n),
		started: make(pgtype.FlatArray[*pgtype.Timestamptz], n)}
	for i := range n {
		p.ids[i], p.started[i] = &ids[i], &started[i]
	}
	return p
}

func (p attemptParams) set(i int, a Attempt) {
	*p.ids[i] = pgtype.Int8{Int64: a.ID, Valid: true}
	p.attempts[i] = int32(a.Attempt)
	*p.started[i] = pgtype.Timestamptz{Time: a.StartedAt, Valid: true}
}

// split returns the parameters that name as.
func split(as []Attempt) attemptParams {
	p := newAttemptParams(len(as))
	for i, a := range as {
		p.set(i, a)
	}
	return p
}
