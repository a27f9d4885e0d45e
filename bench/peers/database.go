package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// database is one throwaway PostgreSQL database. Every scenario gets its own so
// that no system sees another's tables, NOTIFY traffic, dead tuples or
// autovacuum debt: each starts from the same empty state.
type database struct {
	name  string
	dsn   string
	admin string
}

// createDatabase creates fila_peers_<random> next to the database adminDSN
// points at. The caller must call drop, on every path.
func createDatabase(ctx context.Context, adminDSN string) (*database, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random name: %w", err)
	}
	name := "fila_peers_" + hex.EncodeToString(b[:])
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		return nil, err
	}
	if err := adminExec(ctx, adminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &database{name: name, dsn: dsn, admin: adminDSN}, nil
}

// drop removes the database, terminating whatever sessions are still in it.
// It runs on its own context so that it still works after Ctrl-C has
// cancelled the scenario's.
func (d *database) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, d.admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.name, err)
	}
	return nil
}

// pool opens a pool of at most maxConns connections to the database.
func (d *database) pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", d.name, err)
	}
	return p, nil
}

// adminExec runs one statement on a short-lived connection. CREATE and DROP
// DATABASE cannot run inside a transaction, and a connection of its own
// keeps the admin side out of every scenario's pools.
func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn with its database name replaced by name.
func withDatabase(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("DSN %q is not a postgres:// URL", dsn)
	}
	u.Path = "/" + name
	return u.String(), nil
}
