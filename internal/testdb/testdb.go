// Package testdb gives each test a PostgreSQL database of its own, so tests
// run in parallel, NOTIFY channels never cross between tests, and nothing is
// left behind.
//
// TEST_DATABASE_URL points at a direct administrative connection (default
// postgres://postgres@127.0.0.1:5432/postgres). When FILA_TEST_PGBOUNCER_URL
// is set (for example postgres://postgres@127.0.0.1:6432/postgres), DSN goes
// through that PgBouncer while DirectDSN stays direct: the suite then runs as
// a user behind a transaction-mode pooler would.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
)

// DefaultAdminURL is used when TEST_DATABASE_URL is not set.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres"

// AdminURL returns the direct administrative DSN tests connect to.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// ThroughPgBouncer reports whether the suite runs its main DSNs through PgBouncer.
func ThroughPgBouncer() bool { return os.Getenv("FILA_TEST_PGBOUNCER_URL") != "" }

// DB is one throwaway database.
type DB struct {
	Name      string
	DSN       string // main DSN: through PgBouncer when FILA_TEST_PGBOUNCER_URL is set
	DirectDSN string // always straight to PostgreSQL (for listeners)
	Pool      *pgxpool.Pool
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

func admin(t testing.TB) *pgxpool.Pool {
	adminOnce.Do(func() {
		cfg, err := pgconfig.Pool(AdminURL())
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		adminPool, adminErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if adminErr != nil {
		t.Fatalf("testdb: admin pool: %v", adminErr)
	}
	return adminPool
}

// maxPrefix keeps a prefixed name (prefix, "_" and 12 hex digits) within
// PostgreSQL's 63 bytes.
const maxPrefix = 50

// CheckPrefix refuses a database name prefix that is not lower-case
// letters, digits and underscores starting with a letter, or is too long.
func CheckPrefix(prefix string) error {
	if prefix == "" || len(prefix) > maxPrefix {
		return fmt.Errorf("database name prefix %q: give 1 to %d characters", prefix, maxPrefix)
	}
	for i, c := range prefix {
		ok := c >= 'a' && c <= 'z' || c == '_' || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("database name prefix %q: only lower-case letters, digits and _ (a letter first), not %q", prefix, c)
		}
	}
	return nil
}

// WithDatabase returns dsn with its database name replaced.
func WithDatabase(t testing.TB, dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("testdb: parse %q: %v", dsn, err)
	}
	u.Path = "/" + name
	return u.String()
}

// New creates an empty database and drops it (terminating its sessions) when
// the test ends.
func New(t testing.TB) *DB {
	t.Helper()
	return NewNamed(t, "fila_test")
}

// NewNamed is New with the database named prefix_ and random hex: tests of
// one application can tell their databases apart from another's.
func NewNamed(t testing.TB, prefix string) *DB {
	t.Helper()
	if err := CheckPrefix(prefix); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return newDB(t, prefix, "template0")
}

// newDB creates the database prefix_ and random hex as a copy of from.
func newDB(t testing.TB, prefix, from string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	ap := admin(t)
	if _, err := ap.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{from}.Sanitize()); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	db := &DB{Name: name, DirectDSN: WithDatabase(t, AdminURL(), name)}
	db.DSN = db.DirectDSN
	if pb := os.Getenv("FILA_TEST_PGBOUNCER_URL"); pb != "" {
		db.DSN = WithDatabase(t, pb, name)
	}
	t.Cleanup(func() {
		if db.Pool != nil {
			closePool(t, db.Pool, name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := ap.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	cfg, err := pgconfig.Pool(db.DSN)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	cfg.MaxConns = 8
	db.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	return db
}

// closeWait bounds how long a test's end waits for its pool to close: a
// connection still acquired then belongs to a transaction the test left
// open. It is longer than pgx takes to close a connection whose statement
// a cancelled context interrupted (it counts as acquired until then, and
// pgx gives the server up to 15 s to answer the cancel request and the
// Terminate): TestIdle's notify traffic once took more than 10 s there
// under the race pass.
const closeWait = 30 * time.Second

// closePool closes pool, waiting at most closeWait. pgxpool's Close waits
// for every acquired connection to come back, so a test that stopped
// between Begin and Rollback (a failed require while it held a row lock)
// would otherwise hang until the package's timeout, minutes later, with
// its own failure unreported. The database's drop that follows ends the
// session left open. A test that had not failed is failed here, since
// leaving a transaction open is a defect of the test.
func closePool(t testing.TB, pool *pgxpool.Pool, name string) {
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeWait):
		acquired := pool.Stat().AcquiredConns()
		if !t.Failed() {
			t.Errorf("testdb: %d connections of %s's pool still in use %s after the test ended: a transaction left open?", acquired, name, closeWait)
		} else {
			t.Logf("testdb: %d connections of %s's pool still in use %s after the test ended; dropping the database ends their sessions", acquired, name, closeWait)
		}
	}
}

// NeedsVersion fails the test (skips it outside the test command, see
// Missing) when the server is older than PostgreSQL major, which what
// names the reason of.
func (db *DB) NeedsVersion(t testing.TB, major int, what string) {
	t.Helper()
	var version int
	if err := db.Pool.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatalf("testdb: read the server's version: %v", err)
	}
	if version < major*10000 {
		Missing(t, "%s needs PostgreSQL %d or later; this server is %d", what, major, version)
	}
}

// SetDefault sets a session default of the database (ALTER DATABASE … SET),
// which only sessions opened afterwards take. Behind PgBouncer the pooler
// keeps its server sessions, opened before, so it is told to replace them
// (RECONNECT on its admin console), and SetDefault waits until a session
// through it shows the new value. Pools opened before keep their sessions.
func (db *DB) SetDefault(t testing.TB, setting, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ident := pgx.Identifier{db.Name}.Sanitize()
	if _, err := admin(t).Exec(ctx, "ALTER DATABASE "+ident+" SET "+pgx.Identifier{setting}.Sanitize()+" = "+quoteLiteral(value)); err != nil {
		t.Fatalf("testdb: set %s on %s: %v", setting, db.Name, err)
	}
	want := readSetting(ctx, t, db.DirectDSN, setting)
	pb := os.Getenv("FILA_TEST_PGBOUNCER_URL")
	if pb == "" {
		return
	}
	console, err := pgconn.Connect(ctx, WithDatabase(t, pb, "pgbouncer"))
	if err != nil {
		t.Fatalf("testdb: PgBouncer's admin console: %v", err)
	}
	defer console.Close(context.Background())
	// RECONNECT closes each server connection once it is released, idle
	// ones at PgBouncer's next pass: until every connection opened before
	// it is gone, a client may still be given a session with the old value.
	old := serverPIDs(ctx, t, console, db.Name)
	if _, err := console.Exec(ctx, "RECONNECT "+db.Name).ReadAll(); err != nil {
		t.Fatalf("testdb: RECONNECT %s on PgBouncer: %v", db.Name, err)
	}
	for {
		left := 0
		for pid := range serverPIDs(ctx, t, console, db.Name) {
			if old[pid] {
				left++
			}
		}
		got := readSetting(ctx, t, db.DSN, setting)
		if left == 0 && got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testdb: through PgBouncer, %d server connections from before RECONNECT remain and a session has %s = %q, not %q",
				left, setting, got, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// serverPIDs returns the backend pids of PgBouncer's server connections to
// the named database, from its admin console's SHOW SERVERS.
func serverPIDs(ctx context.Context, t testing.TB, console *pgconn.PgConn, dbname string) map[string]bool {
	t.Helper()
	res, err := console.Exec(ctx, "SHOW SERVERS").ReadAll()
	if err != nil || len(res) == 0 {
		t.Fatalf("testdb: SHOW SERVERS on PgBouncer: %v", err)
	}
	dbCol, pidCol := -1, -1
	for i, f := range res[0].FieldDescriptions {
		switch f.Name {
		case "database":
			dbCol = i
		case "remote_pid":
			pidCol = i
		}
	}
	if dbCol < 0 || pidCol < 0 {
		t.Fatalf("testdb: SHOW SERVERS has no database or remote_pid column")
	}
	pids := map[string]bool{}
	for _, row := range res[0].Rows {
		if string(row[dbCol]) == dbname {
			pids[string(row[pidCol])] = true
		}
	}
	return pids
}

// readSetting opens a session of its own and reads one setting's value.
func readSetting(ctx context.Context, t testing.TB, dsn, setting string) string {
	t.Helper()
	cfg, err := pgconfig.Conn(dsn)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: connect to read %s: %v", setting, err)
	}
	defer conn.Close(context.Background())
	var v string
	for {
		err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&v)
		if err == nil {
			return v
		}
		// A tiny statement_timeout being set can cancel this very read on
		// a cold backend of a loaded machine: read again on the same,
		// warmer, backend.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" || ctx.Err() != nil {
			t.Fatalf("testdb: read %s: %v", setting, err)
		}
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
