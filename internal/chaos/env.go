package chaos

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

	"github.com/fila-run/fila/internal/patroni"
	"github.com/fila-run/fila/internal/pgbouncer"
	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/migrations"
)

// Env is where scenarios run.
type Env struct {
	// AdminDSN is a direct DSN to the PostgreSQL to use. Each scenario
	// creates a database of its own there and drops it afterwards.
	AdminDSN string
	// PoolerDSN, if set, leads to a PgBouncer in transaction mode in front of
	// the same PostgreSQL; the workers' main DSNs then go through it (with
	// the database name replaced), while listeners stay direct.
	PoolerDSN string
	// Cluster is the PostgreSQL AdminDSN leads to, when the Env owns it. The
	// PostgreSQL restart scenarios need it.
	Cluster *pgcluster.Cluster
	// Bouncer is a PgBouncer the Env owns, in front of the same PostgreSQL.
	// The PgBouncer restart scenario needs it.
	Bouncer *pgbouncer.Bouncer
	// Patroni is a replicated cluster the Env owns, apart from the
	// PostgreSQL above. The high-availability scenarios (NeedsPatroni) run
	// on it.
	Patroni *patroni.Cluster
	// FilaBin is the fila binary the process scenarios run `fila work` with.
	FilaBin string
	// Logger receives the workers' logs. Defaults to zap.NewNop().
	Logger *zap.Logger
	// Progress, if set, is told what a scenario is doing, a line at a time.
	Progress func(line string)

	// created, if set, is called after newDatabase created a database and
	// before it connects to it (the HA scenarios wait for the standby to
	// replay it: see patroni.Cluster.WaitReplayed).
	created func(ctx context.Context) error
}

func (e *Env) logger() *zap.Logger {
	if e.Logger == nil {
		return zap.NewNop()
	}
	return e.Logger
}

func (e *Env) progress(format string, args ...any) {
	if e.Progress != nil {
		e.Progress(fmt.Sprintf(format, args...))
	}
}

// database is one throwaway database of a scenario.
type database struct {
	name   string
	dsn    string        // main DSN: through Env.PoolerDSN when set
	direct string        // straight to PostgreSQL
	pool   *pgxpool.Pool // direct: setup and observation, never the path under test
	env    *Env
}

// newDatabase creates and migrates a database named after the scenario.
func (e *Env) newDatabase(ctx context.Context, scenario string) (*database, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "fila_chaos_" + scenario + "_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, e.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", describe(e.AdminDSN), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	d := &database{name: name, env: e}
	if e.created != nil {
		if err := e.created(ctx); err != nil {
			d.drop()
			return nil, fmt.Errorf("database %s created: %w", name, err)
		}
	}
	if d.direct, err = withDatabase(e.AdminDSN, name); err != nil {
		return nil, err
	}
	d.dsn = d.direct
	if e.PoolerDSN != "" {
		if d.dsn, err = withDatabase(e.PoolerDSN, name); err != nil {
			return nil, err
		}
	}
	cfg, err := pgconfig.Pool(d.direct)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 8
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		d.drop()
		return nil, err
	}
	if _, err := migrations.Migrate(ctx, d.pool); err != nil {
		d.drop()
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	return d, nil
}

// via returns the database's DSN through another pooler DSN.
func (d *database) via(poolerDSN string) string {
	s, err := withDatabase(poolerDSN, d.name)
	if err != nil {
		panic(err) // poolerDSN came from a pgbouncer.Bouncer: always a URL
	}
	return s
}

// drop closes the pool and drops the database, terminating its sessions.
func (d *database) drop() {
	if d.pool != nil {
		d.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		// The server may be coming back from a restart fault.
		admin, err := pgx.Connect(ctx, d.env.AdminDSN)
		if err == nil {
			_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)")
			admin.Close(ctx)
		}
		if err == nil || attempt == 20 || ctx.Err() != nil {
			if err != nil {
				d.env.logger().Warn("could not drop a scenario database", zap.String("database", d.name), zap.Error(err))
			}
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func withDatabase(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("DSN %q must be a URL (postgres://user@host:port/db)", dsn)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// describe names a DSN's server and database without its password.
func describe(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "the database"
	}
	return u.Host + u.Path
}

// errSkipped is wrapped by a scenario that cannot run in its Env.
var errSkipped = errors.New("skipped")

// ErrSkipped reports whether err says a scenario could not run in its Env
// (it needs a cluster, a PgBouncer or the fila binary the Env lacks).
func ErrSkipped(err error) bool { return errors.Is(err, errSkipped) }

func (e *Env) need(cluster, bouncer, bin bool) error {
	switch {
	case cluster && e.Cluster == nil:
		return fmt.Errorf("%w: needs a PostgreSQL of its own to restart (Env.Cluster)", errSkipped)
	case bouncer && e.Bouncer == nil:
		return fmt.Errorf("%w: needs a PgBouncer of its own to restart (Env.Bouncer)", errSkipped)
	case bin && e.FilaBin == "":
		return fmt.Errorf("%w: needs the fila binary (Env.FilaBin)", errSkipped)
	}
	return nil
}
