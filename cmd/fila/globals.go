package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fila-run/fila/internal/pgconfig"
)

// globals are the flags every command accepts.
type globals struct {
	dsn       string
	listenDSN string
	logLevel  string
	logFormat string

	stdout, stderr io.Writer
	logger         *zap.Logger
}

func (g *globals) addFlags(fs *flag.FlagSet) {
	if fs.Lookup("dsn") != nil {
		return
	}
	fs.StringVar(&g.dsn, "dsn", g.dsn, "main database DSN; may point at PgBouncer in transaction mode (default: $FILA_DSN, $DATABASE_URL, then the PG* environment / localhost)")
	fs.StringVar(&g.listenDSN, "listen-dsn", g.listenDSN, "direct PostgreSQL DSN for the listener; never a transaction-mode pooler (default: $FILA_LISTEN_DSN, then --dsn)")
	fs.StringVar(&g.logLevel, "log-level", or(g.logLevel, "info"), "log level: debug, info, warn, error")
	fs.StringVar(&g.logFormat, "log-format", or(g.logFormat, "auto"), "log format: console, json, or auto (console on a terminal)")
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

// listenerDSN resolves --listen-dsn.
func (g *globals) listenerDSN() string {
	for _, v := range []string{g.listenDSN, os.Getenv("FILA_LISTEN_DSN")} {
		if v != "" {
			return v
		}
	}
	return g.mainDSN()
}

// log returns the command's logger, built on first use.
func (g *globals) log() *zap.Logger {
	if g.logger != nil {
		return g.logger
	}
	level, err := zapcore.ParseLevel(g.logLevel)
	if err != nil {
		fmt.Fprintf(g.stderr, "fila: --log-level %q is not a level; using info\n", g.logLevel)
		level = zapcore.InfoLevel
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	format := g.logFormat
	if format == "auto" {
		format = "json"
		if f, ok := g.stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	if format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	g.logger = zap.New(zapcore.NewCore(enc, zapcore.AddSync(g.stderr), level))
	return g.logger
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", describe(cfg), err)
	}
	return pool, nil
}

// describe names a database without its password.
func describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
