package report

import (
	"net/url"
	"os"
	"strings"
)

// PlainTransport returns dsn with sslmode=disable added when it names no
// sslmode and PGSSLMODE is unset, and dsn itself otherwise.
//
// Every system of a comparison must reach the server the same way. pgx's
// default, sslmode=prefer, negotiates TLS with a server that offers it (as
// Debian's PostgreSQL does, with its snakeoil certificate), while
// node-postgres's default does not: without this, Fila, River and the SQL
// floor would encrypt every message and graphile-worker and pg-boss would
// not. A DSN that names sslmode keeps it, and every system then uses it.
func PlainTransport(dsn string) string {
	if os.Getenv("PGSSLMODE") != "" {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// key=value form (or empty: the PG* environment and defaults).
		if strings.Contains(dsn, "sslmode") {
			return dsn
		}
		return strings.TrimSpace(dsn + " sslmode=disable")
	}
	q := u.Query()
	if q.Has("sslmode") {
		return dsn
	}
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}
