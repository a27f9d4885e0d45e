package runtime

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// transact runs fn as one transaction on db: one of Fila's own, at READ
// COMMITTED, when db is a pool or a connection (pgx's or database/sql's);
// a savepoint when db is the caller's transaction, so that a failure of fn
// leaves that transaction usable. It returns false, having run nothing,
// when db can open neither.
func transact(ctx context.Context, db DB, fn func(DB) error) (bool, error) {
	switch b := db.(type) {
	case *sqlDB:
		return b.transact(ctx, fn)
	case txBeginner: // a pool or a connection
		return true, pgx.BeginTxFunc(ctx, b, readCommitted, func(tx pgx.Tx) error { return fn(tx) })
	case beginner: // the caller's transaction
		return true, pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error { return fn(tx) })
	}
	return false, nil
}

// savepoint runs fn in a savepoint when db is the caller's transaction,
// and on db as it is otherwise.
func savepoint(ctx context.Context, db DB, fn func(DB) error) error {
	switch b := db.(type) {
	case pgx.Tx:
		return pgx.BeginFunc(ctx, b, func(sp pgx.Tx) error { return fn(sp) })
	case *sqlDB:
		if b.inTx() {
			_, err := b.transact(ctx, fn)
			return err
		}
	}
	return fn(db)
}
