package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// globals are the flags every command accepts.
type globals struct {
	dsn       string
	listenDSN string
	// schema is --schema: "" when not given (the search_path's tables).
	schema    string
	logLevel  string
	logFormat string

	// name is the command being run ("enqueue", "jobs retry"), for messages.
	name string

	// laterSignals receives the SIGINTs and SIGTERMs after the first one,
	// which cancelled the command's context.
	laterSignals <-chan os.Signal

	stdin          io.Reader
	stdout, stderr io.Writer
	logger         *zap.Logger
}

func (g *globals) addFlags(fs *flag.FlagSet) {
	if fs.Lookup("dsn") != nil {
		return
	}
	fs.StringVar(&g.dsn, "dsn", g.dsn, "main database DSN; may point at PgBouncer in transaction mode (default: $FILA_DSN, $DATABASE_URL, then the PG* environment / localhost)")
	fs.StringVar(&g.listenDSN, "listen-dsn", g.listenDSN, "direct PostgreSQL DSN for the listener; never a transaction-mode pooler (default: $FILA_LISTEN_DSN, then --dsn)")
	fs.Func("schema", "schema of Fila's tables, for applications sharing one database (fila migrate --schema creates it); the connections' search_path (default: the tables the search_path finds)", func(v string) error {
		if err := channel.ValidateSchema(v); err != nil {
			return err
		}
		g.schema = v
		return nil
	})
	fs.StringVar(&g.logLevel, "log-level", or(g.logLevel, "info"), "log level: debug, info, warn, error")
	fs.StringVar(&g.logFormat, "log-format", or(g.logFormat, "auto"), "log format: console, json, or auto (console on a terminal, else json); logs go to stderr, coloured only on a terminal")
}

// checkLogFlags refuses a log level or format that does not exist, rather
// than logging in some other way than asked.
func (g *globals) checkLogFlags() error {
	if _, err := zapcore.ParseLevel(g.logLevel); err != nil {
		return fmt.Errorf("--log-level %q is unknown: use debug, info, warn or error", g.logLevel)
	}
	switch g.logFormat {
	case "auto", "console", "json":
		return nil
	}
	return fmt.Errorf("--log-format %q is unknown: use auto, console or json", g.logFormat)
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// mainDSN resolves --dsn: the flag, $FILA_DSN, $DATABASE_URL, then an empty
// DSN, which pgx fills from the PG* environment and localhost defaults.
func (g *globals) mainDSN() string {
	for _, v := range []string{g.dsn, os.Getenv("FILA_DSN"), os.Getenv("DATABASE_URL")} {
		if v != "" {
			return v
		}
	}
	return ""
}

// dsnGiven reports whether a DSN was given, by --dsn or the environment,
// rather than left to pgx's localhost defaults.
func (g *globals) dsnGiven() bool {
	return g.mainDSN() != "" || os.Getenv("PGHOST") != "" || os.Getenv("PGDATABASE") != ""
}

// listenerDSN resolves --listen-dsn.
func (g *globals) listenerDSN() string {
	for _, v := range []string{g.listenDSN, os.Getenv("FILA_LISTEN_DSN")} {
		if v != "" {
			return v
		}
	}
	return g.mainDSN()
}

// log returns the command's logger, built on first use. Logs go to stderr;
// level names are coloured only when stderr is a terminal, so a pipe or a
// file never receives escape codes.
func (g *globals) log() *zap.Logger {
	if g.logger != nil {
		return g.logger
	}
	level, err := zapcore.ParseLevel(g.logLevel)
	if err != nil {
		level = zapcore.InfoLevel // checkLogFlags refused it already
	}
	encCfg := logEncoderConfig()
	tty := isTerminal(g.stderr)
	var enc zapcore.Encoder
	if g.logFormat == "console" || (g.logFormat == "auto" && tty) {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		if tty {
			encCfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	g.logger = zap.New(zapcore.NewCore(enc, zapcore.AddSync(g.stderr), level))
	return g.logger
}

// logEncoderConfig is how fila's logs write their fields: times in ISO
// 8601, durations with their unit ("lease": "30s"), not as a bare number.
func logEncoderConfig() zapcore.EncoderConfig {
	c := zap.NewProductionEncoderConfig()
	c.EncodeTime = zapcore.ISO8601TimeEncoder
	c.EncodeDuration = zapcore.StringDurationEncoder
	return c
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (g *globals) sync() {
	if g.logger != nil {
		_ = g.logger.Sync()
	}
}

// pool opens a pool on the main DSN and checks that the database answers, so
// an unreachable database is one clear line rather than a later failure.
func (g *globals) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgconfig.Pool(g.mainDSN())
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	if g.schema != "" {
		if err := runtime.UseSchema(cfg, g.schema); err != nil {
			return nil, fmt.Errorf("--schema: %w", err)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if g.schema != "" && pgconfig.SearchPathRefused(err) {
			return nil, fmt.Errorf("cannot reach the database at %s with --schema %s: %s: %w", describe(cfg), g.schema, pgconfig.SearchPathAdvice, err)
		}
		return nil, fmt.Errorf("cannot reach the database at %s: %w", describe(cfg), err)
	}
	return pool, nil
}

// migratedPool is pool for the commands that read or write the jobs table:
// on a database Fila's tables are missing from (or older than this build
// expects), it says to run `fila migrate` instead of failing on a missing
// relation.
func (g *globals) migratedPool(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := g.pool(ctx)
	if err != nil {
		return nil, err
	}
	v, err := migrations.Version(ctx, pool)
	want := migrations.Latest()
	switch {
	case err != nil:
	case v == 0 && g.schema != "":
		err = fmt.Errorf("schema %s has no Fila tables: run `fila migrate --schema %s` first", g.schema, g.schema)
	case v == 0:
		err = errors.New("the database has no Fila tables: run `fila migrate` first")
	case v < want:
		err = fmt.Errorf("the database is at migration version %d, this fila needs %d: run `fila migrate` first", v, want)
	case v > want:
		err = fmt.Errorf("the database is at migration version %d, newer than this fila's %d: upgrade fila, or go back to %d with the newer one (fila migrate --to %d)", v, want, want, want)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// describe names a database without its password.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
