package claimer

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimRow is one row of fila_claim's result, read from its wire bytes.
//
// pgx's Scan finds a plan for each of the row's fourteen values on every
// row and goes through an interface per value: in a drain it was about a
// seventh of the worker's CPU. The claim's columns never change, so when
// the server sent them in the binary format (text columns: either) with the types fila_claim
// declares (the prepared and described modes do), they are read here
// directly; any other format or type falls back to Scan.
type claimRow struct {
	idNull                        bool
	id                            int64
	kind, payload, metadata       []byte // nil when NULL; they point into pgx's buffer
	policy                        []byte
	priority                      int16
	attempt, maxAttempts, rescued int32
	rescuedNull                   bool
	createdAt, startedAt          time.Time
	waitMs, nextDueMs             float64
	nextDueNull                   bool
	tags                          []string
}

// claimColumns are the OIDs of sqlClaim's columns, in order.
var claimColumns = [...]uint32{
	pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int4OID,
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.Float8OID, pgtype.Int4OID, pgtype.Float8OID,
	pgtype.TextOID, pgtype.TextArrayOID, pgtype.TextOID,
}

// rawClaimRows reports whether rows described by fds can be read by
// readClaimRow.
func rawClaimRows(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(claimColumns) {
		return false
	}
	for i, fd := range fds {
		// A text value's bytes are the same in both formats (pgx asks for
		// text columns in the text one).
		if fd.DataTypeOID != claimColumns[i] || fd.Format != pgtype.BinaryFormatCode && fd.DataTypeOID != pgtype.TextOID {
			return false
		}
	}
	return true
}

// readClaimRow reads one row's binary values into r.
func readClaimRow(vals [][]byte, r *claimRow) error {
	if len(vals) != len(claimColumns) {
		return fmt.Errorf("%d values, want %d", len(vals), len(claimColumns))
	}
	var err error
	fixed := func(i, size int) []byte {
		v := vals[i]
		if v != nil && len(v) != size && err == nil {
			err = fmt.Errorf("column %d: %d bytes, want %d", i+1, len(v), size)
			return nil
		}
		return v
	}
	int64At := func(i int) (int64, bool) {
		v := fixed(i, 8)
		if v == nil {
			return 0, true
		}
		return int64(binary.BigEndian.Uint64(v)), false
	}
	int32At := func(i int) (int32, bool) {
		v := fixed(i, 4)
		if v == nil {
			return 0, true
		}
		return int32(binary.BigEndian.Uint32(v)), false
	}
	float64At := func(i int) (float64, bool) {
		v := fixed(i, 8)
		if v == nil {
			return 0, true
		}
		return math.Float64frombits(binary.BigEndian.Uint64(v)), false
	}
	timeAt := func(i int) time.Time {
		us, null := int64At(i)
		if null {
			return time.Time{}
		}
		return timestamptz(us)
	}
	r.id, r.idNull = int64At(0)
	r.kind, r.payload, r.metadata, r.policy = vals[1], vals[2], vals[11], vals[13]
	if v := fixed(3, 2); v != nil {
		r.priority = int16(binary.BigEndian.Uint16(v))
	} else {
		r.priority = 0
	}
	r.attempt, _ = int32At(4)
	r.maxAttempts, _ = int32At(5)
	r.createdAt, r.startedAt = timeAt(6), timeAt(7)
	r.waitMs, _ = float64At(8)
	r.rescued, r.rescuedNull = int32At(9)
	r.nextDueMs, r.nextDueNull = float64At(10)
	if err != nil {
		return err
	}
	var ok bool
	if r.tags, ok = textArray(vals[12]); !ok {
		r.tags = nil
		if err := pgtype.NewMap().Scan(pgtype.TextArrayOID, pgtype.BinaryFormatCode, vals[12], &r.tags); err != nil {
			return fmt.Errorf("column 13: %w", err)
		}
	}
	return nil
}

// pgEpochMicros is 2000-01-01 00:00:00 UTC, PostgreSQL's epoch, in
// microseconds since the Unix epoch.
const pgEpochMicros = 946684800 * 1000000

// timestamptz is the time of a binary timestamptz, in the local location
// as pgx gives it. A claim's times are never infinite.
func timestamptz(us int64) time.Time {
	us += pgEpochMicros
	return time.Unix(us/1000000, us%1000000*1000)
}

// textArray decodes a one-dimensional binary text[] as pgx's Scan into a
// []string does: nil when NULL, empty when it has no elements. Anything
// else (a NULL element, more dimensions) is left to pgx: ok is false.
func textArray(v []byte) (tags []string, ok bool) {
	if v == nil {
		return nil, true
	}
	if len(v) < 12 {
		return nil, false
	}
	switch binary.BigEndian.Uint32(v) {
	case 0:
		return []string{}, true
	case 1:
	default:
		return nil, false
	}
	if len(v) < 20 {
		return nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	v = v[20:]
	if n < 0 || n > len(v)/4 {
		return nil, false
	}
	size := 0
	for i, rest := 0, v; i < n; i++ {
		if len(rest) < 4 {
			return nil, false
		}
		l := int(int32(binary.BigEndian.Uint32(rest)))
		if l < 0 || l > len(rest)-4 {
			return nil, false
		}
		size += l
		rest = rest[4+l:]
	}
	// One string holds every element: one allocation for the array's text
	// instead of one per tag.
	var b strings.Builder
	b.Grow(size)
	for i, rest := 0, v; i < n; i++ {
		l := int(binary.BigEndian.Uint32(rest))
		b.Write(rest[4 : 4+l])
		rest = rest[4+l:]
	}
	all := b.String()
	tags = make([]string, n)
	for i, off := 0, 0; i < n; i++ {
		l := int(binary.BigEndian.Uint32(v))
		tags[i] = all[off : off+l]
		off += l
		v = v[4+l:]
	}
	return tags, true
}

// claimScan reads claim rows with pgx's Scan, for the formats readClaimRow
// does not read (text results, as the exec and simple protocol modes ask
// for).
type claimScan struct {
	id, priority, attempts, maxAttempt, rescued pgtype.Int8
	kind, payload, metadata, policy             pgtype.DriverBytes
	createdAt, started                          pgtype.Timestamptz
	waitMs, nextDue                             pgtype.Float8
	tags                                        []string
	dest                                        []any
}

func newClaimScan() *claimScan {
	c := new(claimScan)
	c.dest = []any{&c.id, &c.kind, &c.payload, &c.priority, &c.attempts, &c.maxAttempt, &c.createdAt,
		&c.started, &c.waitMs, &c.rescued, &c.nextDue, &c.metadata, &c.tags, &c.policy}
	return c
}

func (c *claimScan) read(rows pgx.Rows, r *claimRow) error {
	// Scanned into afresh for each row (pgx makes a new slice for each
	// value), so the job keeps its own.
	c.tags = nil
	if err := rows.Scan(c.dest...); err != nil {
		return err
	}
	*r = claimRow{
		idNull: !c.id.Valid, id: c.id.Int64, kind: c.kind, payload: c.payload, metadata: c.metadata,
		priority: int16(c.priority.Int64), attempt: int32(c.attempts.Int64), maxAttempts: int32(c.maxAttempt.Int64),
		rescued: int32(c.rescued.Int64), rescuedNull: !c.rescued.Valid,
		createdAt: c.createdAt.Time, startedAt: c.started.Time,
		waitMs: c.waitMs.Float64, nextDueMs: c.nextDue.Float64, nextDueNull: !c.nextDue.Valid,
		tags: c.tags, policy: c.policy,
	}
	return nil
}

// readCompleted reads fila_complete's one row, three arrays naming the
// attempts it completed, into their Finished records. In the binary format
// the arrays are read from their wire bytes straight into the records:
// pgx's Scan into three slices cost some 250 bytes of allocation a job in
// a drain, more than the records themselves. Other formats go through
// Scan.
func readCompleted(rows pgx.Rows) ([]Finished, error) {
	fds := rows.FieldDescriptions()
	if len(fds) == 3 && fds[0].DataTypeOID == pgtype.Int8ArrayOID && fds[1].DataTypeOID == pgtype.Int4ArrayOID &&
		fds[2].DataTypeOID == pgtype.TimestamptzArrayOID && fds[0].Format == pgtype.BinaryFormatCode &&
		fds[1].Format == pgtype.BinaryFormatCode && fds[2].Format == pgtype.BinaryFormatCode {
		vals := rows.RawValues()
		ids, idsOK := fixedArray(vals[0], 8)
		attempts, attemptsOK := fixedArray(vals[1], 4)
		started, startedOK := fixedArray(vals[2], 8)
		if idsOK && attemptsOK && startedOK {
			n := len(ids) / 12
			if len(attempts)/8 != n || len(started)/12 != n {
				return nil, fmt.Errorf("%d ids, %d attempts and %d start times returned", n, len(attempts)/8, len(started)/12)
			}
			out := make([]Finished, n)
			for i := range out {
				// Each element is its length (4 bytes) and its value.
				id := int64(binary.BigEndian.Uint64(ids[12*i+4:]))
				attempt := int(int32(binary.BigEndian.Uint32(attempts[8*i+4:])))
				us := int64(binary.BigEndian.Uint64(started[12*i+4:]))
				// The key holds microseconds since the Unix epoch (see Key).
				out[i] = Finished{Key: AttemptKey{ID: id, Attempt: attempt, Started: us + pgEpochMicros}, State: StateCompleted}
			}
			return out, nil
		}
	}
	var (
		doneIDs      []int64
		doneAttempts []int32
		doneStarted  []time.Time
	)
	if err := rows.Scan(&doneIDs, &doneAttempts, &doneStarted); err != nil {
		return nil, err
	}
	if len(doneAttempts) != len(doneIDs) || len(doneStarted) != len(doneIDs) {
		return nil, fmt.Errorf("%d ids, %d attempts and %d start times returned",
			len(doneIDs), len(doneAttempts), len(doneStarted))
	}
	out := make([]Finished, len(doneIDs))
	for i, id := range doneIDs {
		out[i] = Finished{Key: Attempt{ID: id, Attempt: int(doneAttempts[i]), StartedAt: doneStarted[i]}.Key(), State: StateCompleted}
	}
	return out, nil
}

// fixedArray returns the elements of a one-dimensional binary array whose
// elements are all size bytes and none NULL, each still led by its length;
// ok is false for anything else (then Scan reads it). An empty array has no
// elements.
func fixedArray(v []byte, size int) (elems []byte, ok bool) {
	if len(v) < 12 {
		return nil, false
	}
	switch binary.BigEndian.Uint32(v) {
	case 0:
		return nil, true
	case 1:
	default:
		return nil, false
	}
	if len(v) < 20 || binary.BigEndian.Uint32(v[4:]) != 0 { // has NULLs
		return nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	elems = v[20:]
	if n < 0 || len(elems) != n*(4+size) {
		return nil, false
	}
	for i := 0; i < n; i++ {
		if int(int32(binary.BigEndian.Uint32(elems[i*(4+size):]))) != size {
			return nil, false
		}
	}
	return elems, true
}
