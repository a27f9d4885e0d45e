// Package pgconfig turns a DSN into pgx configurations that are safe behind
// PgBouncer in transaction mode.
package pgconfig

import (
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
