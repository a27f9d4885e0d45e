package claimer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// Conn is what a Store runs its statements on: a *pgxpool.Pool or a
// *pgx.Conn.
type Conn interface {
	DB
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Every statement of the Store is one statement in a transaction of its
// own, and needs two things of its session that a database or a role may
// set otherwise:
//   - READ COMMITTED: a claim's FOR NO KEY UPDATE SKIP LOCKED must move on
//     to the newest version of a row another worker changed, which
//     REPEATABLE READ and SERIALIZABLE refuse with a serialization failure
//     (SQLSTATE 40001) instead: every busy claim failed;
//   - its own timeout, the one its context gives: a role's statement_timeout
//     of a few milliseconds cancelled the same 1 000-job claim, sent again
//     and again, and no job ran at all.
//
// When the session's defaults differ (SetExplicitSession, which the runtime
// calls after reading them at start, or the first statement they fail,
// which is then run again), each statement is sent as BEGIN ISOLATION LEVEL
// READ COMMITTED, a set_config of statement_timeout to what is left of the
// statement's context (none without a deadline), the statement, COMMIT,
// pipelined in one round trip. A batch takes the connection's default
// statement mode, unnamed statements, so the call is parsed each time: a
// one-job claim from Go (p50 of 300 interleaved, three runs on loopback)
// took 0.56–0.65 ms prepared and plain, 0.72–0.81 ms so wrapped. It is
// therefore not done where the defaults are already right.
const (
	beginReadCommitted  = "BEGIN ISOLATION LEVEL READ COMMITTED"
	setStatementTimeout = "SELECT set_config('statement_timeout', $1::text, true)"
)

// SetExplicitSession makes every statement of s run in a transaction that
// sets READ COMMITTED and its own statement timeout, whatever the
// session's defaults.
func (s *Store) SetExplicitSession(on bool) { s.explicit.Store(on) }

// ExplicitSession reports whether s sets its isolation and timeouts itself.
func (s *Store) ExplicitSession() bool { return s.explicit.Load() }

// SetLogger gives s a logger for the rare events it handles itself (the
// switch to explicit isolation). Call it before the Store is used.
func (s *Store) SetLogger(l *zap.Logger) { s.log = l }

// IsSerializationFailure reports whether err is PostgreSQL refusing a
// statement under REPEATABLE READ or SERIALIZABLE (SQLSTATE 40001).
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}

// IsSessionTimeout reports whether err is the session's statement_timeout
// cancelling a statement (SQLSTATE 57014 for that reason, not for a
// cancellation the client asked for).
func IsSessionTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014" && strings.Contains(pgErr.Message, "statement timeout")
}

// IsTimeout reports whether err is a statement that ran out of time: its
// context's deadline, or a statement timeout.
func IsTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		(errors.As(err, &pgErr) && pgErr.Code == "57014" && strings.Contains(pgErr.Message, "timeout"))
}

// inSession runs fn, the whole of one Store method, and runs it again with
// an explicit session if the session's own defaults refused it (a
// serialization failure, or its statement_timeout): the statement that
// failed committed nothing. An explicit session still runs its first two
// statements (BEGIN, and the set_config of the statement's own timeout)
// under the session's timeout, and on a loaded machine a fresh backend
// took longer than a role's 8 ms for them: fn runs up to sessionRetries
// times in all.
func (s *Store) inSession(ctx context.Context, fn func() error) error {
	err := fn()
	for try := 1; try < sessionRetries && err != nil && ctx.Err() == nil &&
		(IsSerializationFailure(err) || IsSessionTimeout(err)); try++ {
		if s.explicit.CompareAndSwap(false, true) && s.log != nil {
			s.log.Warn("a statement failed under the session's defaults (isolation or statement_timeout); Fila's statements set their own from now on",
				zap.Error(err))
		}
		err = fn()
	}
	return err
}

// sessionRetries is how many times inSession runs a method whose statements
// the session's defaults refused.
const sessionRetries = 4

// query runs sql, in a READ COMMITTED transaction of its own when s sets
// isolation itself.
func (s *Store) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !s.explicit.Load() {
		return s.db.Query(ctx, sql, s.args(args...)...)
	}
	br := s.sendWrapped(ctx, sql, args)
	if err := skipPreamble(br); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &committingRows{Rows: rows, br: br}, nil
}

// exec runs sql as query does, for its command tag.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !s.explicit.Load() {
		return s.db.Exec(ctx, sql, s.args(args...)...)
	}
	br := s.sendWrapped(ctx, sql, args)
	defer br.Close()
	if err := skipPreamble(br); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if err != nil {
		return tag, err
	}
	if _, err := br.Exec(); err != nil {
		return tag, err
	}
	return tag, br.Close()
}

// queryRow runs sql as query does and scans its one row into dest.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if !s.explicit.Load() {
		return s.db.QueryRow(ctx, sql, s.args(args...)...).Scan(dest...)
	}
	rows, err := s.query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// sendWrapped sends BEGIN, the statement's own timeout, the statement and
// COMMIT in one round trip.
func (s *Store) sendWrapped(ctx context.Context, sql string, args []any) pgx.BatchResults {
	b := &pgx.Batch{}
	b.Queue(beginReadCommitted)
	b.Queue(setStatementTimeout, timeoutOf(ctx))
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	return s.db.SendBatch(ctx, b) // in the connection's default statement mode: a batch takes no other

}

// skipPreamble reads the results of BEGIN and of the timeout's set_config.
func skipPreamble(br pgx.BatchResults) error {
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

// committingRows reads a wrapped statement's rows, then its COMMIT.
type committingRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error // the COMMIT's, or closing the batch's
}

func (r *committingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *committingRows) Close() {
	if r.br == nil {
		return
	}
	r.Rows.Close()
	if r.Rows.Err() == nil {
		_, r.err = r.br.Exec()
	}
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
	r.br = nil
}

func (r *committingRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// Exec runs one statement of the caller's (the worker's registry, its
// counters, its scheduler) as the Store runs its own: in READ COMMITTED and
// with its own timeout when the session's defaults differ.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := s.inSession(ctx, func() (err error) {
		tag, err = s.exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// QueryRow runs one statement of the caller's as Exec does and scans its
// one row into dest.
func (s *Store) QueryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return s.inSession(ctx, func() error { return s.queryRow(ctx, sql, args, dest...) })
}

// SetLocalTimeout gives a transaction of the caller's the timeout of its
// context, when the Store sets its own: statements inside it do not then
// inherit the session's statement_timeout.
func (s *Store) SetLocalTimeout(ctx context.Context, tx DB) error {
	if !s.explicit.Load() {
		return nil
	}
	_, err := tx.Exec(ctx, setStatementTimeout, timeoutOf(ctx))
	return err
}

// timeoutOf is what is left of ctx, in milliseconds, as statement_timeout
// takes it: "0" (none) without a deadline.
func timeoutOf(ctx context.Context) string {
	if d, ok := ctx.Deadline(); ok {
		return strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10)
	}
	return "0"
}
