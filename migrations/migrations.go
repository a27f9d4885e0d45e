package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/channel"
)

// files holds the numbered migrations only: schema.sql, the schema they
// build, is there to be read, not shipped.
//
//go:embed *.up.sql *.down.sql
var files embed.FS

// Migration is one numbered step.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var dir string
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			dir = "up"
		case strings.HasSuffix(name, ".down.sql"):
			dir = "down"
		default:
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q: name must start with a number and '_'", name)
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: strings.TrimSuffix(strings.TrimSuffix(rest, ".up.sql"), ".down.sql")}
			byVersion[v] = m
		}
		if dir == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Latest is the version a fully migrated database is at.
func Latest() int {
	all, err := All()
	if err != nil || len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

// Migrate applies every migration the database lacks, in one transaction,
// holding an advisory lock for that transaction. It returns the versions it
// applied (none when the database was already current).
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return MigrateTo(ctx, pool, Latest())
}

// MigrateTo applies the migrations the database lacks up to version
// target, as Migrate does. A database already at or past target is left
// as it is: Rollback goes down.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, target int) ([]int, error) {
	return MigrateIn(ctx, pool, "", target)
}

// MigrateIn is MigrateTo for Fila's tables in schema, which it creates when
// missing; "" is the schema the pool's search_path finds, as MigrateTo.
// The transaction sets its own search_path to schema alone, so the tables
// and functions go there and the functions keep naming the tables
// unqualified: the runtime's connections find them with the same
// search_path (runtime.Config.Schema). Each schema has its own migration
// lock: a long migration of one application's schema holds back no other
// application's start-up.
func MigrateIn(ctx context.Context, pool *pgxpool.Pool, schema string, target int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if err := checkTarget(target); err != nil {
		return nil, err
	}
	var applied []int
	err = locked(ctx, pool, schema, true, func(tx pgx.Tx, current int) error {
		for _, m := range all {
			if m.Version <= current || m.Version > target {
				continue
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO fila_migrations (version, name) VALUES ($1::int, $2::text)", pgx.QueryExecModeExec, m.Version, m.Name); err != nil {
				return fmt.Errorf("record migration %d: %w", m.Version, err)
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// Rollback undoes the migrations above version target with their down
// scripts, newest first, in one transaction under the same advisory lock,
// and returns the versions it undid (none when the database is at or below
// target). Workers of a build that needs a newer version must be stopped
// first: the functions they call go. Rolling back to 0 drops fila_jobs and
// every job in it; down to any other version, jobs stay.
func Rollback(ctx context.Context, pool *pgxpool.Pool, target int) ([]int, error) {
	return RollbackIn(ctx, pool, "", target)
}

// RollbackIn is Rollback for Fila's tables in schema ("" is the schema the
// pool's search_path finds). It leaves the schema itself, even when rolling
// back to 0: other objects may live there.
func RollbackIn(ctx context.Context, pool *pgxpool.Pool, schema string, target int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if err := checkTarget(target); err != nil {
		return nil, err
	}
	var undone []int
	err = locked(ctx, pool, schema, false, func(tx pgx.Tx, current int) error {
		if current > Latest() {
			return fmt.Errorf("database is at migration version %d, newer than this build's %d: roll back with the fila that migrated it", current, Latest())
		}
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if m.Version > current || m.Version <= target {
				continue
			}
			if strings.TrimSpace(m.Down) == "" {
				return fmt.Errorf("migration %04d_%s has no down script", m.Version, m.Name)
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("roll back migration %04d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM fila_migrations WHERE version = $1::int", pgx.QueryExecModeExec, m.Version); err != nil {
				return fmt.Errorf("unrecord migration %d: %w", m.Version, err)
			}
			undone = append(undone, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return undone, nil
}

// checkTarget names a version this build does not have.
func checkTarget(target int) error {
	if target < 0 || target > Latest() {
		return fmt.Errorf("migration version %d does not exist: this build has 0 (no tables) to %d", target, Latest())
	}
	return nil
}

// locked runs fn in a transaction that holds the migration lock, with the
// database's version, creating fila_migrations when it is missing. With a
// schema, the transaction's search_path is that schema alone, created first
// when create is set, and the lock is the schema's own.
func locked(ctx context.Context, pool *pgxpool.Pool, schema string, create bool, fn func(tx pgx.Tx, current int) error) error {
	if schema != "" {
		if err := channel.ValidateSchema(schema); err != nil {
			return err
		}
	}
	// READ COMMITTED whatever the database's default: the lock serialises
	// migrations, and the DDL must see what the one before committed.
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if err := lockMigration(ctx, tx, schema); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if schema != "" {
			if err := useSchema(ctx, tx, schema, create); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fila_migrations (
			version    int PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create fila_migrations: %w", err)
		}
		current, err := version(ctx, tx)
		if err != nil {
			return err
		}
		return fn(tx, current)
	})
}

// lockMigration takes the migration lock of schema for tx: LockMigrate for
// the default schema, as every version before schemas did, so an older
// fila migrating beside this one still waits; the pair (LockMigrateSchema,
// hashtext(schema)) for another.
func lockMigration(ctx context.Context, tx pgx.Tx, schema string) error {
	if !channel.Named(schema) {
		_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", pgx.QueryExecModeExec, LockMigrate)
		return err
	}
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::int, hashtext($2::text))", pgx.QueryExecModeExec, LockMigrateSchema, schema)
	return err
}

// useSchema points tx's search_path at schema alone (SET LOCAL: through a
// transaction-mode pooler too, the setting goes with the transaction),
// creating the schema first when create is set.
func useSchema(ctx context.Context, tx pgx.Tx, schema string, create bool) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)", pgx.QueryExecModeExec, schema).Scan(&exists); err != nil {
		return fmt.Errorf("look for schema %s: %w", schema, err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	switch {
	case !exists && !create:
		return fmt.Errorf("schema %s does not exist: there is nothing of Fila's to roll back there", schema)
	case !exists:
		// CREATE SCHEMA only when missing: IF NOT EXISTS still needs the
		// CREATE privilege on the database, which a role that owns an
		// existing schema may lack.
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
			return fmt.Errorf("create schema %s: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+ident); err != nil {
		return fmt.Errorf("use schema %s: %w", schema, err)
	}
	return nil
}

// Querier is what Version and Check need: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// unnamed is the argument that sends a statement unnamed on pgx's own
// pools, connections and transactions: pgx prepares and caches statements
// by default, which PgBouncer in transaction mode cannot keep (the next
// transaction may run on another server connection), so migrating through
// it with a pool of pgx's defaults failed with "prepared statement …
// already exists". Other Queriers choose their own way.
func unnamed(q Querier) []any {
	switch q.(type) {
	case *pgxpool.Pool, *pgxpool.Conn, *pgx.Conn, pgx.Tx:
		return []any{pgx.QueryExecModeExec}
	}
	return nil
}

// Version returns the database's migration version, 0 when Fila was never
// migrated there.
func Version(ctx context.Context, q Querier) (int, error) { return version(ctx, q) }

func version(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM fila_migrations", unnamed(q)...).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	return v, nil
}

// ErrNotMigrated is wrapped by Check when the database is behind.
var ErrNotMigrated = errors.New("database is not migrated")

// Check returns an error that says what to run when the database is not at
// the version this binary expects.
func Check(ctx context.Context, q Querier) error {
	v, err := version(ctx, q)
	if err != nil {
		return err
	}
	want := Latest()
	switch {
	case v < want:
		return fmt.Errorf("%w: it is at version %d, this build needs %d; run `fila migrate` (or migrations.Migrate)", ErrNotMigrated, v, want)
	case v > want:
		return fmt.Errorf("database is at migration version %d, newer than this build's %d; upgrade fila, or go back to %d with the newer one (fila migrate --to %d)", v, want, want, want)
	}
	return nil
}
