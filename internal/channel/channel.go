// Package channel maps queue names to the NOTIFY channel their jobs are
// announced on, and a schema's name to the names derived from it. The insert
// trigger (migrations) and the listener must agree on this mapping, so it
// lives in one place.
//
// Fila's tables in the schema public (or found through the search_path with
// no schema named) announce a queue on Prefix+queue, as they always have.
// Tables in another schema announce it on "fila:"+schema+":"+queue, cut to
// 63 bytes: NOTIFY channels are database-wide, and two applications in two
// schemas of one database must not wake each other's workers. A queue name
// never holds a ':', so no channel of one schema is another's.
package channel

import (
	"fmt"
	"regexp"
	"strings"
)

// Prefix is put before a queue name to form its channel. The triggers in
// migrations/schema.sql spell the same prefix.
const Prefix = "fila_"

// MaxQueueLen keeps Prefix+queue within PostgreSQL's 63-byte identifier limit,
// so LISTEN on the channel never silently truncates it.
const MaxQueueLen = 63 - len(Prefix)

// queuePattern is the same rule as the fila_jobs_queue_valid CHECK constraint.
var queuePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ValidateQueue returns an error naming the problem when queue cannot be used
// as a queue name (and therefore cannot become a channel name).
func ValidateQueue(queue string) error {
	switch {
	case queue == "":
		return fmt.Errorf("queue name is empty")
	case len(queue) > MaxQueueLen:
		return fmt.Errorf("queue name %q is %d bytes; at most %d fit in a channel name", queue, len(queue), MaxQueueLen)
	case !queuePattern.MatchString(queue):
		return fmt.Errorf("queue name %q may contain only letters, digits, '_', '.' and '-'", queue)
	}
	return nil
}

// ForQueue returns the channel the insert trigger of the schema public
// notifies for queue.
func ForQueue(queue string) (string, error) {
	return ForQueueIn("", queue)
}

// DefaultSchema is the schema whose channels, publication and logical
// messages keep the names of an install that names no schema.
const DefaultSchema = "public"

// MaxSchemaLen is the longest schema name Fila accepts: its publication,
// "fila_jobs_inserts_"+schema, must fit PostgreSQL's 63-byte identifiers.
const MaxSchemaLen = 63 - len("fila_jobs_inserts_")

// schemaPattern is a plain identifier: it needs no quoting in a channel or
// a logical message's prefix, and holds no ':' (see the package comment).
var schemaPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateSchema returns an error naming the problem when schema cannot hold
// Fila's tables. An empty schema is refused: a caller with no schema to name
// leaves the setting unset rather than empty.
func ValidateSchema(schema string) error {
	switch {
	case schema == "":
		return fmt.Errorf("schema name is empty")
	case len(schema) > MaxSchemaLen:
		return fmt.Errorf("schema name %q is %d bytes; at most %d fit in the names Fila derives from it", schema, len(schema), MaxSchemaLen)
	case !schemaPattern.MatchString(schema):
		return fmt.Errorf("schema name %q may contain only ASCII letters, digits and '_', and may not start with a digit", schema)
	case strings.HasPrefix(strings.ToLower(schema), "pg_"):
		return fmt.Errorf("schema name %q starts with pg_, which PostgreSQL reserves for its own schemas", schema)
	}
	return nil
}

// Named reports whether schema is one whose names differ from an install's
// with no schema named: neither empty nor public.
func Named(schema string) bool { return schema != "" && schema != DefaultSchema }

// PrefixIn is what the channels of schema's queues start with: Prefix for
// the default schema, "fila:"+schema+":" for another.
func PrefixIn(schema string) string {
	if !Named(schema) {
		return Prefix
	}
	return "fila:" + schema + ":"
}

// ForQueueIn returns the channel the insert trigger of the tables in schema
// notifies for queue ("" is the default schema). A channel longer than 63
// bytes is refused rather than cut, as the trigger cuts it: two long queue
// names would share a channel.
func ForQueueIn(schema, queue string) (string, error) {
	if err := ValidateQueue(queue); err != nil {
		return "", err
	}
	ch := PrefixIn(schema) + queue
	if len(ch) > 63 {
		return "", fmt.Errorf("queue name %q is %d bytes; in schema %s at most %d fit in a channel name", queue, len(queue), schema, 63-len(PrefixIn(schema)))
	}
	return ch, nil
}

// MessagePrefix is the prefix of the logical messages the triggers of the
// tables in schema emit in WAL mode, whose content is the queue: "fila" for
// the default schema, "fila:"+schema for another.
func MessagePrefix(schema string) string {
	if !Named(schema) {
		return "fila"
	}
	return "fila:" + schema
}

// Publication is the publication of the inserts into schema's fila_jobs
// that the WAL source streams: publications are database-wide.
func Publication(schema string) string {
	if !Named(schema) {
		return "fila_jobs_inserts"
	}
	return "fila_jobs_inserts_" + schema
}
