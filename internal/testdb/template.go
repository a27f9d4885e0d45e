package testdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
)

// Templates: most tests want a database with Fila's tables, and applying
// every migration costs the server about as much again as creating the
// database. So the first such test of a process builds a template database
// once and the others copy it (CREATE DATABASE … TEMPLATE), as PostgreSQL
// copies template0 for New.
//
// A template is the process's own (its pid is in the name): nothing outside
// the process connects to it, which a copy requires, and DropTemplates,
// from the package's TestMain, drops it when the tests are over. Templates
// of test processes that died before that are dropped by the next process
// that builds one, when the server is on this machine and so their pids
// can be checked.

// templatePrefix starts every template's name; the pid and the key follow.
const templatePrefix = "fila_tpl_"

var templates struct {
	mu    sync.Mutex
	built map[string]*template
	swept sync.Once
}

type template struct {
	once sync.Once
	name string
	err  error
}

// NewFrom is New with the database copied from the template that build
// makes, once per process and key, in an empty database of its own. key
// names what build makes (a digest of the migrations, say): lower-case
// letters, digits and _, at most 30 characters.
func NewFrom(t testing.TB, key string, build func(ctx context.Context, pool *pgxpool.Pool) error) *DB {
	t.Helper()
	if err := CheckPrefix(key); err != nil || len(key) > 30 {
		t.Fatalf("testdb: template key %q: lower-case letters, digits and _, a letter first, at most 30 characters", key)
	}
	templates.mu.Lock()
	if templates.built == nil {
		templates.built = map[string]*template{}
	}
	tp := templates.built[key]
	if tp == nil {
		tp = &template{name: templatePrefix + strconv.Itoa(os.Getpid()) + "_" + key}
		templates.built[key] = tp
	}
	templates.mu.Unlock()
	tp.once.Do(func() { tp.err = buildTemplate(t, tp.name, build) })
	if tp.err != nil {
		t.Fatalf("testdb: template %s: %v", tp.name, tp.err)
	}
	return newDB(t, "fila_test", tp.name)
}

// buildTemplate creates the database name and runs build in it, over a
// direct pool it closes before returning: a copy needs the template to
// have no session.
func buildTemplate(t testing.TB, name string, build func(ctx context.Context, pool *pgxpool.Pool) error) error {
	ap := admin(t)
	templates.swept.Do(func() { sweepTemplates(ap) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := ap.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	err := func() error {
		cfg, err := pgconfig.Pool(WithDatabase(t, AdminURL(), name))
		if err != nil {
			return err
		}
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		return build(ctx, pool)
	}()
	if err != nil {
		_, _ = ap.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		return err
	}
	return nil
}

// DropTemplates drops the templates this process built. A package whose
// tests use NewFrom calls it from TestMain once m.Run has returned.
func DropTemplates() error {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	var errs []error
	for key, tp := range templates.built {
		delete(templates.built, key)
		if tp.err != nil || adminPool == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := adminPool.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{tp.name}.Sanitize()+" WITH (FORCE)")
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("testdb: drop template %s: %w", tp.name, err))
		}
	}
	return errors.Join(errs...)
}

// sweepTemplates drops the templates of test processes of this machine
// that are gone (killed, or timed out before their TestMain dropped them).
// It does nothing when the server is elsewhere, where a pid says nothing.
func sweepTemplates(ap *pgxpool.Pool) {
	u, err := url.Parse(AdminURL())
	if err != nil {
		return
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1", "":
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := ap.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", templatePrefix)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(name, templatePrefix), "_")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not one of ours, or its process is alive
		}
		_, _ = ap.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}
