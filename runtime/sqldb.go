package runtime

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLQuerier is what SQL wraps: a *sql.Tx, *sql.DB or *sql.Conn, or
// anything with their three methods (sqlc's DBTX, Bun's bun.IDB, GORM's
// ConnPool).
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL returns q, a database/sql handle, as a DB: what every insert and
// job-management function takes. Given the caller's *sql.Tx, a job is
// enqueued in that transaction, and exists only if it commits. It works on
// pgx's driver (github.com/jackc/pgx/v5/stdlib) and on lib/pq: arguments
// a driver may refuse (lists, JSON, durations) travel in PostgreSQL's text
// format, and each column is read back by its type as pgx reads it.
//
// Where Fila runs several statements as one (InsertMany with unique keys,
// InsertBatch, a retry that meets a unique key taken meanwhile), it opens a
// transaction of its own on a *sql.DB or *sql.Conn, and a savepoint in a
// *sql.Tx. Any other SQLQuerier gets the statements one by one: give such
// a handle inside a transaction. database/sql has no COPY, so InsertMany
// writes every batch in one INSERT statement. A nil q, or a transaction
// already committed or rolled back, makes every call fail with an error
// that says so.
func SQL(q SQLQuerier) DB {
	if q == nil {
		return &sqlDB{err: errors.New("runtime.SQL: no database/sql handle given (nil)")}
	}
	if v := reflect.ValueOf(q); v.Kind() == reflect.Pointer && v.IsNil() {
		return &sqlDB{err: fmt.Errorf("runtime.SQL: the %T given is nil", q)}
	}
	return &sqlDB{q: q}
}

// sqlDB is a database/sql handle as a DB.
type sqlDB struct {
	q   SQLQuerier
	err error // a bad handle given to SQL, returned by every call
}

// Exec runs a statement and reports the rows it affected.
func (d *sqlDB) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	if d.err != nil {
		return pgconn.CommandTag{}, d.err
	}
	a, err := sqlArgs(args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	res, err := d.q.ExecContext(ctx, query, a...)
	if err != nil {
		return pgconn.CommandTag{}, sqlError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, fmt.Errorf("rows affected: %w", err)
	}
	return commandTag(query, n), nil
}

// Query runs a statement and returns its rows, read as pgx reads them.
func (d *sqlDB) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	if d.err != nil {
		return nil, d.err
	}
	a, err := sqlArgs(args)
	if err != nil {
		return nil, err
	}
	rows, err := d.q.QueryContext(ctx, query, a...)
	if err != nil {
		return nil, sqlError(err)
	}
	return newSQLRows(rows)
}

// QueryRow runs a statement and returns its first row; Scan returns
// pgx.ErrNoRows (which is also sql.ErrNoRows) when there is none.
func (d *sqlDB) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	rows, err := d.Query(ctx, query, args...)
	return sqlRow{rows: rows, err: err}
}

// sqlBeginner opens a transaction: a *sql.DB or a *sql.Conn.
type sqlBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// transact runs fn as one transaction: Fila's own, at READ COMMITTED, on a
// *sql.DB or *sql.Conn; a savepoint of the caller's *sql.Tx. It returns
// false, having run nothing, for a handle that can do neither.
func (d *sqlDB) transact(ctx context.Context, fn func(DB) error) (bool, error) {
	if d.err != nil {
		return true, d.err
	}
	switch q := d.q.(type) {
	case *sql.Tx:
		return true, d.savepoint(ctx, fn)
	case sqlBeginner:
		tx, err := q.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return true, fmt.Errorf("begin: %w", sqlError(err))
		}
		defer func() { _ = tx.Rollback() }() // after the commit, a no-op
		if err := fn(&sqlDB{q: tx}); err != nil {
			return true, err
		}
		if err := tx.Commit(); err != nil {
			return true, fmt.Errorf("commit: %w", sqlError(err))
		}
		return true, nil
	}
	return false, nil
}

// inTx says d is the caller's transaction.
func (d *sqlDB) inTx() bool {
	_, ok := d.q.(*sql.Tx)
	return ok
}

// savepointName is the savepoint Fila opens in a caller's transaction.
// PostgreSQL keeps savepoints of the same name nested, and ROLLBACK TO and
// RELEASE act on the newest: one name serves any depth.
const savepointName = "fila_savepoint"

// savepoint runs fn in a savepoint of the caller's transaction, rolled back
// to if fn fails, so that the transaction stays usable.
func (d *sqlDB) savepoint(ctx context.Context, fn func(DB) error) error {
	if _, err := d.q.ExecContext(ctx, "SAVEPOINT "+savepointName); err != nil {
		return fmt.Errorf("savepoint: %w", sqlError(err))
	}
	released := false
	defer func() {
		if !released { // fn failed or panicked
			_, _ = d.q.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+savepointName)
			_, _ = d.q.ExecContext(context.WithoutCancel(ctx), "RELEASE SAVEPOINT "+savepointName)
		}
	}()
	if err := fn(d); err != nil {
		return err
	}
	if _, err := d.q.ExecContext(ctx, "RELEASE SAVEPOINT "+savepointName); err != nil {
		return fmt.Errorf("release savepoint: %w", sqlError(err))
	}
	released = true
	return nil
}

// commandTag is the tag pgx would report for query having affected n
// rows: its command, then the count, which is what Fila reads of it.
func commandTag(query string, n int64) pgconn.CommandTag {
	verb, _, _ := strings.Cut(strings.TrimSpace(query), " ")
	verb = strings.ToUpper(verb)
	if verb == "INSERT" {
		verb += " 0"
	}
	return pgconn.NewCommandTag(verb + " " + strconv.FormatInt(n, 10))
}

// sqlError makes a driver's PostgreSQL error readable as a
// *pgconn.PgError, which Fila checks for unique violations and payload
// limits: pgx's driver returns one already; lib/pq's *pq.Error has the same
// fields under other names, and an SQLState method.
func sqlError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err
	}
	var coded interface{ SQLState() string }
	if !errors.As(err, &coded) {
		return err
	}
	pg := &pgconn.PgError{Code: coded.SQLState()}
	if v := reflect.Indirect(reflect.ValueOf(coded)); v.Kind() == reflect.Struct {
		for name, field := range map[string]*string{
			"Severity": &pg.Severity, "Message": &pg.Message, "Detail": &pg.Detail, "Hint": &pg.Hint,
			"Where": &pg.Where, "Schema": &pg.SchemaName, "Table": &pg.TableName, "Column": &pg.ColumnName,
			"DataTypeName": &pg.DataTypeName, "Constraint": &pg.ConstraintName, "Routine": &pg.Routine,
		} {
			if f := v.FieldByName(name); f.IsValid() && f.Kind() == reflect.String {
				*field = f.String()
			}
		}
	}
	return &driverError{err: err, pg: pg}
}

// driverError is a driver's error that also reads as a *pgconn.PgError.
type driverError struct {
	err error
	pg  *pgconn.PgError
}

func (e *driverError) Error() string   { return e.err.Error() }
func (e *driverError) Unwrap() []error { return []error{e.err, e.pg} }
