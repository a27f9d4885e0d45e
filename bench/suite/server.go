package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// DefaultDSN is the server tried when the caller names none.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/postgres"

// server is the PostgreSQL the scenarios create their databases on: the one
// the DSN names, or a throwaway cluster of our own.
type server struct {
	adminDSN string
	admin    *pgxpool.Pool // on the admin database: CREATE/DROP DATABASE, statistics
	cluster  *pgcluster.Cluster
	log      *zap.Logger
}

// openServer connects to dsn. When nothing answers there and throwaway is
// set, it starts a throwaway cluster from the installed PostgreSQL binaries
// instead; Close removes it. Every connection of the run, the peers'
// included, goes without TLS unless dsn names an sslmode (see
// report.PlainTransport).
func openServer(ctx context.Context, dsn string, throwaway bool, log *zap.Logger) (*server, error) {
	dsn = report.PlainTransport(dsn)
	s := &server{adminDSN: dsn, log: log}
	err := s.connect(ctx)
	if err == nil {
		return s, nil
	}
	if !throwaway {
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", redact(dsn), err)
	}
	log.Warn("no PostgreSQL answers; starting a throwaway cluster", zap.String("dsn", redact(dsn)), zap.Error(err))
	c, cerr := pgcluster.Start(ctx, pgcluster.Options{Logger: log})
	if cerr != nil {
		return nil, fmt.Errorf("no PostgreSQL at %s (%v), and no throwaway cluster either: %w", redact(dsn), err, cerr)
	}
	s.cluster, s.adminDSN = c, report.PlainTransport(c.DSN("postgres"))
	if err := s.connect(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("throwaway cluster: %w", err)
	}
	return s, nil
}

func (s *server) connect(ctx context.Context) error {
	cfg, err := pgconfig.Pool(s.adminDSN)
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return err
	}
	s.admin = pool
	return nil
}

// Close closes the admin pool and removes the throwaway cluster, if any.
func (s *server) Close() error {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cluster != nil {
		return s.cluster.Close()
	}
	return nil
}

// database is one fresh, migrated database of one scenario.
type database struct {
	srv  *server
	name string
	dsn  string
}

// fresh creates fila_bench_<random> on the server and migrates it. The caller
// must call drop on every path (it works after ctx is cancelled).
func (s *server) fresh(ctx context.Context) (*database, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "fila_bench_" + hex.EncodeToString(b[:])
	dsn, err := withDatabase(s.adminDSN, name)
	if err != nil {
		return nil, err
	}
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	d := &database{srv: s, name: name, dsn: dsn}
	pool, err := d.pool(ctx, 2)
	if err == nil {
		_, err = migrations.Migrate(ctx, pool)
		pool.Close()
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("migrate %s: %w", name, err), d.drop())
	}
	return d, nil
}

// drop removes the database, terminating its sessions. It runs on a context
// of its own, so Ctrl-C still leaves nothing behind.
func (d *database) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.srv.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.name, err)
	}
	return nil
}

// exec runs one statement on a connection of its own.
func (d *database) exec(ctx context.Context, sql string) error {
	cfg, err := pgconfig.Conn(d.dsn)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", d.name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", d.name, err)
	}
	return nil
}

// setNotifyTrigger switches the insert trigger's NOTIFY on or off, as
// `fila trigger` does.
func (d *database) setNotifyTrigger(ctx context.Context, on bool) error {
	cfg, err := pgconfig.Conn(d.dsn)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", d.name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return runtime.SetNotifyTrigger(ctx, conn, on)
}

// pool opens a pool of at most maxConns connections, configured as the
// runtime configures its own (pgconfig: no named prepared statements).
func (d *database) pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(d.dsn)
	if err != nil {
		return nil, err
	}
	return d.openPool(ctx, cfg, maxConns)
}

func (d *database) openPool(ctx context.Context, cfg *pgxpool.Config, maxConns int) (*pgxpool.Pool, error) {
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", d.name, err)
	}
	// Open every connection now, so none is opened while the clock runs.
	conns := make([]*pgxpool.Conn, 0, maxConns)
	for range maxConns {
		c, aerr := pool.Acquire(ctx)
		if aerr != nil {
			err = aerr
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s: %w", d.name, err)
	}
	return pool, nil
}

// producerPool opens a pool of maxConns connections for producers, with
// pgx's defaults (statements prepared and cached per connection), as an
// application connecting straight to PostgreSQL would, and as bench/peers'
// producers do: the producers are the application, not the system measured.
func (d *database) producerPool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	return d.openPool(ctx, cfg, maxConns)
}

func withDatabase(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		if _, perr := pgx.ParseConfig(dsn); perr != nil {
			return "", fmt.Errorf("parse DSN: %w", perr)
		}
		return dsn + " dbname=" + name, nil // key=value: the last dbname wins
	}
	u.Path = "/" + name
	return u.String(), nil
}

// redact hides a DSN's password.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "(DSN)"
	}
	return u.Redacted()
}
