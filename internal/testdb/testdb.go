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
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "fila_test_" + hex.EncodeToString(b[:])
	ap := admin(t)
	if _, err := ap.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	db := &DB{Name: name, DirectDSN: WithDatabase(t, AdminURL(), name)}
	db.DSN = db.DirectDSN
	if pb := os.Getenv("FILA_TEST_PGBOUNCER_URL"); pb != "" {
		db.DSN = WithDatabase(t, pb, name)
	}
	t.Cleanup(func() {
		if db.Pool != nil {
			db.Pool.Close()
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
