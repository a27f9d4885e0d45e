package runtime

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Payload limits. A payload is read whole by every worker that claims its
// job and by every page and command that shows it: one of hundreds of
// megabytes, or an array nested thousands of levels deep (printed
// indented, 2·depth² bytes: 200 MB for a 20 KB payload nested 9 999
// deep), exhausts whichever process reads it. The table refuses such
// payloads with its trigger fila_jobs_payload_limits (migration 0017), and
// the insert API refuses them before sending them.
//
// The defaults: 1 MiB is far above what a job's input needs (ids, a few
// fields, a small document: large data belongs in a table or store of its
// own, with its key in the payload), and a worker running 20 such jobs at
// once (ConcurrencyDefault) holds 20 MiB of them. 64 levels is more than any document
// format nests in practice; a recursive decoder then stays far from its
// own limits (encoding/json stops at 10 000, Python's json near 1 000).
const (
	PayloadMaxBytesDefault = 1 << 20
	PayloadMaxBytesMin     = 1 << 10
	// PayloadMaxBytesMax is jsonb's own limit on a value.
	PayloadMaxBytesMax     = 1<<28 - 1
	PayloadMaxDepthDefault = 64
	PayloadMaxDepthMin     = 1
	PayloadMaxDepthMax     = 10000
)

// PayloadLimits bound a job's payload.
type PayloadLimits struct {
	// MaxBytes is the most bytes the payload's JSON text may take, as
	// PostgreSQL prints it (payload::text: what workers, handlers and
	// `fila jobs show` receive): no insignificant whitespace, a space after
	// each comma and colon. Allowed PayloadMaxBytesMin to
	// PayloadMaxBytesMax. Defaults to PayloadMaxBytesDefault.
	MaxBytes int
	// MaxDepth is how deep arrays and objects may nest: {} and [1] are 1
	// deep, {"a": [1]} is 2. Allowed PayloadMaxDepthMin to
	// PayloadMaxDepthMax. Defaults to PayloadMaxDepthDefault.
	MaxDepth int
}

// WithDefaults returns l with each zero field set to its default.
func (l PayloadLimits) WithDefaults() PayloadLimits {
	if l.MaxBytes == 0 {
		l.MaxBytes = PayloadMaxBytesDefault
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = PayloadMaxDepthDefault
	}
	return l
}

// Validate returns an error naming the first field out of its range.
func (l PayloadLimits) Validate() error {
	switch {
	case l.MaxBytes < PayloadMaxBytesMin || l.MaxBytes > PayloadMaxBytesMax:
		return fmt.Errorf("PayloadLimits.MaxBytes %d out of range: allowed %d to %d", l.MaxBytes, PayloadMaxBytesMin, PayloadMaxBytesMax)
	case l.MaxDepth < PayloadMaxDepthMin || l.MaxDepth > PayloadMaxDepthMax:
		return fmt.Errorf("PayloadLimits.MaxDepth %d out of range: allowed %d to %d", l.MaxDepth, PayloadMaxDepthMin, PayloadMaxDepthMax)
	}
	return nil
}

// ErrPayloadLimit is wrapped by the error of an insert whose payload is
// larger or deeper than its limits, whether the insert API refused it
// before sending it or the table as it was written.
var ErrPayloadLimit = errors.New("payload over its limit")

// payloadLimitsConstraint names the trigger's errors, as a constraint.
const payloadLimitsConstraint = "fila_jobs_payload_limits"

// Check returns an error wrapping ErrPayloadLimit, whose text starts with
// a verb ("is 2097164 bytes as JSON text: at most 1048576 are allowed"),
// when payload, valid JSON text, is over l; each zero field of l is its
// default. It measures payload as PostgreSQL will print it once stored,
// which is what the table's trigger measures, but for numbers written with
// an exponent (jsonb prints 1e3 as 1000) and keys given twice (jsonb keeps
// one).
func (l PayloadLimits) Check(payload []byte) error {
	l = l.WithDefaults()
	size, depth := jsonShape(payload)
	switch {
	case size > l.MaxBytes:
		return fmt.Errorf("is %d bytes as JSON text: at most %d are allowed: %w", size, l.MaxBytes, ErrPayloadLimit)
	case depth > l.MaxDepth:
		return fmt.Errorf("nests arrays and objects %d deep: at most %d are allowed: %w", depth, l.MaxDepth, ErrPayloadLimit)
	}
	return nil
}

// jsonShape measures valid JSON text as PostgreSQL prints it once stored as
// jsonb — no insignificant whitespace, ", " and ": " between elements,
// strings escaped the way jsonb escapes them — and how deep its arrays and
// objects nest. Numbers are counted as written (jsonb prints 1e3 as 1000)
// and a key given twice is counted twice (jsonb keeps one), so the size is
// that of octet_length(payload::text) but for those.
func jsonShape(b []byte) (size, depth int) {
	d := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r':
		case '{', '[':
			d++
			depth = max(depth, d)
			size++
		case '}', ']':
			d--
			size++
		case ',', ':':
			size += 2
		case '"':
			n, end := jsonStringSize(b, i)
			size += n
			i = end
		default:
			size++
		}
	}
	return size, depth
}

// jsonStringSize returns the printed size, quotes included, of the string
// that starts at b[start], and the index of its closing quote.
func jsonStringSize(b []byte, start int) (size, end int) {
	size = 2
	for i := start + 1; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			return size, i
		case c != '\\':
			size++
			continue
		}
		if i+1 >= len(b) {
			return size, len(b)
		}
		i++
		switch b[i] {
		case '/':
			size++
		case 'u':
			r, n := decodeUnicodeEscape(b[i-1:])
			i += n - 2
			size += escapedSize(r)
		default: // \" \\ \b \f \n \r \t
			size += 2
		}
	}
	return size, len(b)
}

// decodeUnicodeEscape reads \uXXXX, or a surrogate pair of two, at the
// start of b, and returns the character and how many bytes it took.
func decodeUnicodeEscape(b []byte) (rune, int) {
	hex := func(p []byte) (rune, bool) {
		if len(p) < 6 || p[0] != '\\' || p[1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range p[2:6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	r, ok := hex(b)
	if !ok {
		return utf8.RuneError, 2
	}
	if r >= 0xd800 && r < 0xdc00 {
		if lo, ok := hex(b[6:]); ok && lo >= 0xdc00 && lo < 0xe000 {
			return 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00), 12
		}
	}
	return r, 6
}

// escapedSize is how many bytes jsonb prints for r inside a string.
func escapedSize(r rune) int {
	switch r {
	case '"', '\\', '\b', '\f', '\n', '\r', '\t':
		return 2
	}
	if r < 0x20 {
		return 6
	}
	if n := utf8.RuneLen(r); n > 0 {
		return n
	}
	return 3 // an unpaired surrogate, which jsonb refuses anyway
}

// payloadLimitError marks an error of the table's payload trigger as
// ErrPayloadLimit; any other error is returned as it is.
func payloadLimitError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName == payloadLimitsConstraint {
		return fmt.Errorf("%w: the table refused it: %w", ErrPayloadLimit, err)
	}
	return err
}

// SQL of the table's payload limits (migration 0017).
const (
	payloadLimitsSQL    = `SELECT max_bytes, max_depth FROM fila_payload_limits()`
	setPayloadLimitsSQL = `SELECT fila_set_payload_limits($1::int, $2::int)`
	// Replacing the trigger waits for the table's writers in flight and
	// holds new ones meanwhile: on a busy table it gives up rather than
	// stall every producer and claim.
	// set_config(…, true) lasts until the transaction ends: the caller's
	// own setting is put back after the replacement.
	setLimitsLockTimeoutSQL = `SELECT current_setting('lock_timeout'), set_config('lock_timeout', '2s', true)`
	resetLockTimeoutSQL     = `SELECT set_config('lock_timeout', $1::text, true)`
)

// TablePayloadLimits returns the limits the table's trigger enforces on
// every insert, whichever client makes it. ok is false when the trigger was
// dropped or disabled: the table then enforces none.
func TablePayloadLimits(ctx context.Context, db DB) (l PayloadLimits, ok bool, err error) {
	var maxBytes, maxDepth *int
	if err := db.QueryRow(ctx, payloadLimitsSQL).Scan(&maxBytes, &maxDepth); err != nil {
		return l, false, fmt.Errorf("read the table's payload limits: %w", err)
	}
	if maxBytes == nil || maxDepth == nil {
		return l, false, nil
	}
	return PayloadLimits{MaxBytes: *maxBytes, MaxDepth: *maxDepth}, true, nil
}

// SetTablePayloadLimits sets the limits the table enforces (each zero field
// to its default), for every session at once. Rows already in the table
// are left as they are, and still claimed, run and shown. It replaces the
// table's trigger, which waits for the writes in flight on the table: it
// gives up after 2 s of waiting, with an error that says so. db is a pool,
// a connection or the caller's transaction.
func SetTablePayloadLimits(ctx context.Context, db DB, l PayloadLimits) error {
	l = l.WithDefaults()
	if err := l.Validate(); err != nil {
		return err
	}
	set := func(tx DB) error {
		var prev, ignored string
		if err := tx.QueryRow(ctx, setLimitsLockTimeoutSQL).Scan(&prev, &ignored); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, setPayloadLimitsSQL, l.MaxBytes, l.MaxDepth); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, resetLockTimeoutSQL, prev)
		return err
	}
	ok, err := transact(ctx, db, set)
	if !ok {
		return errors.New("set the table's payload limits: needs a pool, a connection or a transaction")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return fmt.Errorf("set the table's payload limits: fila_jobs stayed busy with writes for 2 s; try again: %w", err)
	}
	if err != nil {
		return fmt.Errorf("set the table's payload limits: %w", err)
	}
	return nil
}
