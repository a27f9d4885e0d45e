package listener

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Identity names one database: the cluster's system identifier and the
// database's name. Two DSNs reach the same database exactly when their
// identities are equal, whatever host names, ports or poolers they go
// through.
type Identity struct {
	SystemID uint64
	Name     string
}

// IsZero reports whether id is unset.
func (id Identity) IsZero() bool { return id == Identity{} }

func (id Identity) String() string {
	return fmt.Sprintf("database %q of cluster %d", id.Name, id.SystemID)
}

// sqlIdentity reads the cluster's system identifier (unique per initdb, and
// the same through any pooler) and the database's name.
const sqlIdentity = `SELECT system_identifier::text, current_database()::text FROM pg_control_system()`

// Querier is what ReadIdentity needs: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadIdentity reads the identity of the database q is connected to. On
// an error it returns the zero Identity, never a partial one: a statement
// cancelled after its row arrived (a statement_timeout of a few
// milliseconds) has scanned the name already, and a name without its
// cluster would then be checked, and refused, as another database.
func ReadIdentity(ctx context.Context, q Querier) (Identity, error) {
	var id Identity
	var sys string
	if err := q.QueryRow(ctx, sqlIdentity).Scan(&sys, &id.Name); err != nil {
		return Identity{}, fmt.Errorf("read database identity: %w", err)
	}
	if _, err := fmt.Sscan(sys, &id.SystemID); err != nil {
		return Identity{}, fmt.Errorf("read database identity: system identifier %q: %w", sys, err)
	}
	return id, nil
}

// ErrOtherDatabase is wrapped by the error Run returns when the source's DSN
// reaches another database than the one it was told to expect (the main
// DSN's): its wake-ups would be for jobs no claimer of this worker sees.
var ErrOtherDatabase = errors.New("listener: the DSN reaches another database")

// checkIdentity refuses a connection to another database than want (when
// want is set).
func checkIdentity(ctx context.Context, conn *pgx.Conn, timeout time.Duration, want Identity) error {
	if want.IsZero() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got, err := ReadIdentity(ctx, conn)
	if err != nil {
		return err
	}
	if got != want {
		return fatal(fmt.Errorf("%w: it reaches %s, but the jobs are in %s; point both DSNs at the same database",
			ErrOtherDatabase, got, want))
	}
	return nil
}
