// Package pgconfig turns a DSN into pgx configurations that are safe behind
// PgBouncer in transaction mode.
package pgconfig

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool parses a DSN for a pooled connection. Unless the DSN names its own
// default_query_exec_mode, statements use the extended protocol with unnamed
// prepared statements (pgx.QueryExecModeExec): PgBouncer 1.18 in transaction
// mode cannot carry named server-side prepared statements from one transaction
// to the next, and unnamed ones live within a single round trip.
func Pool(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return cfg, nil
}

// Conn parses a DSN for a single dedicated connection (the listener's).
func Conn(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return cfg, nil
}

// NamesExecMode reports whether dsn chooses its own default_query_exec_mode.
func NamesExecMode(dsn string) bool { return strings.Contains(dsn, "default_query_exec_mode") }

// IsDirect reports whether conn reaches PostgreSQL itself rather than a
// pooler: a pooler such as PgBouncer answers the startup with key data of
// its own, so the process id it gives differs from the server's
// pg_backend_pid().
func IsDirect(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()::bigint").Scan(&pid); err != nil {
		return false, err
	}
	return pid == conn.PgConn().PID(), nil
}

// HotPathMode is the statement mode for Fila's hot path on a connection:
// prepared statements, kept by the connection and planned once, when it
// reaches PostgreSQL directly; unnamed statements through a pooler, where
// the functions they call keep their plans in each server backend instead.
func HotPathMode(direct bool) pgx.QueryExecMode {
	if direct {
		return pgx.QueryExecModeCacheStatement
	}
	return pgx.QueryExecModeExec
}

// SearchPathAdvice says what a pooler that refuses the search_path startup
// parameter needs, for the error of a connection with a schema.
const SearchPathAdvice = "the pooler refuses the search_path startup parameter that a schema sets: " +
	"PgBouncer 1.20 or later restores it for each client with track_extra_parameters = search_path " +
	"(ignore_startup_parameters would drop it, and the statements would find another schema's tables, or none)"

// SearchPathRefused reports whether err is a pooler's refusal of the
// search_path startup parameter (PgBouncer before 1.20, or without it in
// track_extra_parameters).
func SearchPathRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unsupported startup parameter: search_path")
}
