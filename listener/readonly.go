package listener

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrStandby is wrapped by the connect error of a source whose DSN led to a
// standby. It is retried like a lost connection, never returned from Run.
var ErrStandby = errors.New("listener: the server is a standby (in recovery)")

// sqlInRecovery says whether the server is a standby.
const sqlInRecovery = `SELECT pg_is_in_recovery()`

// standbyAdvice says what leads a source to the primary of a replicated
// cluster.
const standbyAdvice = "LISTEN and logical decoding need the primary; list every node in the DSN with " +
	"target_session_attrs=read-write to reach whichever is the primary now"

// checkPrimary refuses, for now, a connection to a standby. PostgreSQL 15
// refuses LISTEN there (SQLSTATE 25006) and logical decoding too (55000,
// which the WAL source would otherwise take for wal_level below logical and
// give up on). A standby may be promoted, or the DSN lead elsewhere on the
// next attempt: the source tries again with backoff, and after a failover
// it listens, or streams from a new slot, on the new primary.
func checkPrimary(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var standby bool
	if err := conn.QueryRow(ctx, sqlInRecovery).Scan(&standby); err != nil {
		return fmt.Errorf("read pg_is_in_recovery(): %w", err)
	}
	if standby {
		// The address connected to: with several hosts in the DSN, the
		// configuration names only the first.
		return fmt.Errorf("%w at %s: %s", ErrStandby, conn.PgConn().Conn().RemoteAddr(), standbyAdvice)
	}
	return nil
}
