package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/channel"
)

// UseSchema sets cfg's connections' search_path to schema alone, as the
// runtime does for the connections it opens when Config.Schema is set: a
// pool given as Config.Pool, or one that InsertTx's transactions run on,
// must find the schema's fila_jobs. The value is a startup parameter, so it
// holds through PgBouncer in transaction mode when PgBouncer tracks it
// (track_extra_parameters = search_path).
func UseSchema(cfg *pgxpool.Config, schema string) error {
	if err := channel.ValidateSchema(schema); err != nil {
		return err
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	return nil
}

// sqlJobsSchema is the schema of the fila_jobs a connection's search_path
// finds (NULL when none): one catalog read at start.
const sqlJobsSchema = `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('fila_jobs')`

// jobsSchema reads the schema of the fila_jobs pool finds.
func jobsSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var s *string
	if err := pool.QueryRow(ctx, sqlJobsSchema, pgx.QueryExecModeExec).Scan(&s); err != nil {
		return "", fmt.Errorf("find the schema of fila_jobs: %w", err)
	}
	if s == nil {
		return "", errors.New("no fila_jobs on the search_path")
	}
	return *s, nil
}

// resolveSchema sets r.schema, the schema whose channels and publication
// the wake source follows. With Config.Schema it is that schema, and a
// Config.Pool must find its tables there; without, the schema of the
// tables found, so an install in a schema of its own through the
// search_path hears its triggers, whose channels name it (migration 0031).
func (r *Runtime) resolveSchema(ctx context.Context) error {
	if r.cfg.Schema == "" {
		found, err := jobsSchema(ctx, r.control)
		if err != nil {
			return err
		}
		r.schema = found
		return nil
	}
	r.schema = r.cfg.Schema
	if r.pool == r.control {
		return nil
	}
	found, err := jobsSchema(ctx, r.pool)
	if err != nil {
		return fmt.Errorf("Config.Pool: %w; it must reach schema %s (runtime.UseSchema)", err, r.cfg.Schema)
	}
	if found != r.cfg.Schema {
		return fmt.Errorf("Config.Pool finds fila_jobs in schema %s, not in Config.Schema %s: set its search_path with runtime.UseSchema", found, r.cfg.Schema)
	}
	return nil
}
