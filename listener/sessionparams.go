package listener

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ownStatementTimeout lifts the role's or database's statement_timeout on a
// source's sessions, unless the DSN sets one itself. A source runs only a
// few short checks, each bounded by PingTimeout, and then waits: a default
// of a few milliseconds, set for the application's statements, cancelled
// the first check of each new backend on a loaded machine, over and over,
// and the source never connected. The setting travels in the startup
// packet, so it applies from the first statement, and a replication
// session accepts it too. (A source always reaches PostgreSQL itself: no
// pooler passes the parameter on to a backend it shares.)
func ownStatementTimeout(cfg *pgconn.Config) {
	if _, ok := cfg.RuntimeParams["statement_timeout"]; ok {
		return
	}
	if strings.Contains(cfg.RuntimeParams["options"], "statement_timeout") {
		return
	}
	cfg.RuntimeParams["statement_timeout"] = "0"
}

// connectLifted connects with cfg. A pooler refuses the startup parameter
// (PgBouncer: "unsupported startup parameter"); then it connects again
// without it, so that the checks that follow can say a pooler is in the way
// rather than the connection failing forever on a parameter.
func connectLifted(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil || !refusedStatementTimeout(err) {
		return conn, err
	}
	bare := cfg.Copy()
	delete(bare.RuntimeParams, "statement_timeout")
	return pgx.ConnectConfig(ctx, bare)
}

// refusedStatementTimeout reports whether err is a server's refusal of the
// statement_timeout startup parameter.
func refusedStatementTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" /* protocol_violation */ &&
		strings.Contains(pgErr.Message, "startup parameter") && strings.Contains(pgErr.Message, "statement_timeout")
}

// sqlLiftIdleSessionTimeout turns idle_session_timeout off for the session
// when it is set. current_setting's missing_ok makes it a no-op before
// PostgreSQL 14, which has no such setting.
const sqlLiftIdleSessionTimeout = `SELECT set_config('idle_session_timeout', '0', false)
WHERE current_setting('idle_session_timeout', true) <> '0'`

// liftIdleSessionTimeout turns off, on a listener's session, an
// idle_session_timeout the role or database sets: the session waits for
// notifications, idle by design between its checks every PingInterval,
// and a default shorter than that ended it again and again (each time
// missing what was notified until the reconnect's catch-up claim). It cannot
// travel in the startup packet as statement_timeout does: a server before
// PostgreSQL 14 refuses the connection over an unknown parameter. A WAL
// source's replication session is not subject to it.
func liftIdleSessionTimeout(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := conn.Exec(ctx, sqlLiftIdleSessionTimeout); err != nil {
		return fmt.Errorf("lift idle_session_timeout: %w", err)
	}
	return nil
}
