package runtime

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// How values cross database/sql (see SQL). Fila's statements are written
// for pgx, which sends []string, []*time.Time or a time.Duration as
// PostgreSQL types and scans any column into the Go type given. Through
// database/sql, pgx's driver still takes such values, but lib/pq takes only
// database/sql's own (int64, float64, bool, []byte, string, time.Time):
// the others are sent as their text in PostgreSQL's format, which every
// statement casts ($1::text[]), so both drivers see the same statement.
// Each column comes back as the driver's value, which pgtype decodes by the
// column's type into what Fila scans it into, as pgx would.

// typeMaps lends pgtype.Maps, which are not safe for concurrent use and
// keep the plans they have made.
var typeMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

// sqlArgs are args as a database/sql driver takes them.
func sqlArgs(args []any) ([]any, error) {
	var m *pgtype.Map
	out := make([]any, len(args))
	for i, a := range args {
		v, err := sqlArg(&m, a)
		if err != nil {
			return nil, fmt.Errorf("argument $%d: %w", i+1, err)
		}
		out[i] = v
	}
	if m != nil {
		typeMaps.Put(m)
	}
	return out, nil
}

// sqlArg is one argument as a driver takes it; *m is a Map borrowed when
// one is first needed.
func sqlArg(m **pgtype.Map, a any) (any, error) {
	switch v := a.(type) {
	case nil, string, []byte, int64, float64, bool, time.Time,
		int, int8, int16, int32, uint8, uint16, uint32, float32, driver.Valuer:
		// database/sql's own, or converted by it to its own.
		return a, nil
	case json.RawMessage:
		// Text: lib/pq would send bytes in binary, which jsonb's binary
		// form is not.
		return string(v), nil
	}
	rv := reflect.ValueOf(a)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, nil
		}
		return sqlArg(m, rv.Elem().Interface())
	}
	if *m == nil {
		*m = typeMaps.Get().(*pgtype.Map)
	}
	if t, ok := (*m).TypeForValue(a); ok {
		b, err := (*m).Encode(t.OID, pgtype.TextFormatCode, a, nil)
		if err != nil {
			return nil, fmt.Errorf("encode a %T as %s: %w", a, t.Name, err)
		}
		if b == nil {
			return nil, nil
		}
		return string(b), nil
	}
	switch rv.Kind() {
	case reflect.Map, reflect.Struct:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encode a %T as JSON: %w", a, err)
		}
		return string(b), nil
	}
	return nil, fmt.Errorf("a %T cannot be sent through database/sql", a)
}

// sqlColumn is a column of a database/sql result, with its type's OID.
type sqlColumn struct {
	name string
	oid  uint32
}

// sqlRows are database/sql rows as pgx.Rows.
type sqlRows struct {
	rows   *sql.Rows
	m      *pgtype.Map
	cols   []sqlColumn
	vals   []any // the current row's driver values
	ptrs   []any // &vals[i], for sql.Rows.Scan
	buf    []byte
	err    error
	closed bool
}

func newSQLRows(rows *sql.Rows) (*sqlRows, error) {
	types, err := rows.ColumnTypes()
	if err != nil {
		_ = rows.Close()
		return nil, fmt.Errorf("column types: %w", err)
	}
	r := &sqlRows{rows: rows, m: typeMaps.Get().(*pgtype.Map), cols: make([]sqlColumn, len(types)),
		vals: make([]any, len(types)), ptrs: make([]any, len(types))}
	for i, t := range types {
		r.cols[i] = sqlColumn{name: t.Name(), oid: r.oidOf(t.DatabaseTypeName())}
		r.ptrs[i] = &r.vals[i]
	}
	return r, nil
}

// oidOf is the OID of the type a driver names: pgx's driver and lib/pq
// both give PostgreSQL's name in capitals ("INT8", "_TEXT"), pgx's the
// OID in digits for a type it does not know. 0 is a type pgtype does not
// know either: its values are read as text.
func (r *sqlRows) oidOf(name string) uint32 {
	if t, ok := r.m.TypeForName(strings.ToLower(name)); ok {
		return t.OID
	}
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		if _, ok := r.m.TypeForOID(uint32(n)); ok {
			return uint32(n)
		}
	}
	return 0
}

func (r *sqlRows) Next() bool {
	if r.closed {
		return false
	}
	if !r.rows.Next() {
		r.err = r.rows.Err()
		r.Close()
		return false
	}
	if err := r.rows.Scan(r.ptrs...); err != nil {
		r.err = err
		r.Close()
		return false
	}
	return true
}

// Scan decodes the current row into dest as pgx's Rows.Scan does: one
// destination per column, nil to skip one.
func (r *sqlRows) Scan(dest ...any) error {
	if r.closed && r.err == nil {
		return fmt.Errorf("scan: no current row")
	}
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.cols) {
		return fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(r.cols), len(dest))
	}
	for i, d := range dest {
		if d == nil {
			continue
		}
		if err := r.decode(i, d); err != nil {
			err = fmt.Errorf("can't scan into dest[%d] (col: %s): %w", i, r.cols[i].name, err)
			r.err = err
			r.Close()
			return err
		}
	}
	return nil
}

// decode scans column i's value into dest. A driver gives text columns as
// their text, which is decoded as such; bytea, numbers, booleans and times
// come decoded, and are encoded again in PostgreSQL's binary format for
// pgtype to scan, exactly as pgx scans what the server sends.
func (r *sqlRows) decode(i int, dest any) error {
	oid := r.cols[i].oid
	switch v := r.vals[i].(type) {
	case nil:
		if oid == 0 {
			oid = pgtype.TextOID
		}
		return r.m.Scan(oid, pgtype.TextFormatCode, nil, dest)
	case []byte:
		return r.scanBytes(oid, v, dest)
	case string:
		return r.scanBytes(oid, []byte(v), dest)
	default:
		if oid == 0 {
			t, ok := r.m.TypeForValue(v)
			if !ok {
				return fmt.Errorf("the driver gave a %T of an unknown type", v)
			}
			oid = t.OID
		}
		b, err := r.m.Encode(oid, pgtype.BinaryFormatCode, v, r.buf[:0])
		if err != nil {
			return fmt.Errorf("the driver gave a %T: %w", v, err)
		}
		r.buf = b
		return r.m.Scan(oid, pgtype.BinaryFormatCode, b, dest)
	}
}

// scanBytes scans a text column's text, or a bytea column's bytes.
func (r *sqlRows) scanBytes(oid uint32, b []byte, dest any) error {
	switch oid {
	case pgtype.ByteaOID:
		return r.m.Scan(oid, pgtype.BinaryFormatCode, b, dest)
	case 0:
		oid = pgtype.TextOID
	}
	return r.m.Scan(oid, pgtype.TextFormatCode, b, dest)
}

// Close closes the rows; Next closes them after the last row, as pgx does.
func (r *sqlRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if err := r.rows.Close(); err != nil && r.err == nil {
		r.err = err
	}
	if r.err != nil {
		r.err = sqlError(r.err)
	}
	typeMaps.Put(r.m)
	r.m = nil
}

func (r *sqlRows) Err() error { return r.err }

// CommandTag is empty: database/sql does not report it for a query.
func (r *sqlRows) CommandTag() pgconn.CommandTag { return pgconn.CommandTag{} }

// FieldDescriptions names the columns and their types; RawValues gives
// every value as text.
func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription {
	fds := make([]pgconn.FieldDescription, len(r.cols))
	for i, c := range r.cols {
		fds[i] = pgconn.FieldDescription{Name: c.name, DataTypeOID: c.oid, Format: pgtype.TextFormatCode}
	}
	return fds
}

// Values decodes the current row as pgx's Rows.Values does.
func (r *sqlRows) Values() ([]any, error) {
	if r.closed {
		return nil, fmt.Errorf("values: no current row")
	}
	out := make([]any, len(r.cols))
	for i := range out {
		if err := r.decode(i, &out[i]); err != nil {
			return nil, fmt.Errorf("column %s: %w", r.cols[i].name, err)
		}
	}
	return out, nil
}

// RawValues is the current row in text format, nil for NULL.
func (r *sqlRows) RawValues() [][]byte {
	if r.closed {
		return nil
	}
	out := make([][]byte, len(r.cols))
	for i, c := range r.cols {
		switch v := r.vals[i].(type) {
		case nil:
		case string:
			out[i] = []byte(v)
		case []byte:
			if c.oid != pgtype.ByteaOID {
				out[i] = v
				break
			}
			out[i], _ = r.m.Encode(c.oid, pgtype.TextFormatCode, v, nil)
		default:
			oid := c.oid
			if oid == 0 {
				if t, ok := r.m.TypeForValue(v); ok {
					oid = t.OID
				}
			}
			out[i], _ = r.m.Encode(oid, pgtype.TextFormatCode, v, nil)
		}
	}
	return out
}

// Conn is nil: the rows come through database/sql, not a pgx connection.
func (r *sqlRows) Conn() *pgx.Conn { return nil }

// TypeMap is the Map the rows decode with, nil once they are closed (it
// goes back to typeMaps).
func (r *sqlRows) TypeMap() *pgtype.Map { return r.m }

// sqlRow is the first row of a query, as pgx.Row.
type sqlRow struct {
	rows pgx.Rows
	err  error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
