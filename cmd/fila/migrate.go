package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/migrations"
)

func init() {
	register("migrate", "create or upgrade Fila's tables (safe to run twice, and several at once); --to N goes to version N, down too; --schema S puts them in schema S, created if missing", runMigrate)
}

func runMigrate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	to := fs.Int("to", migrations.Latest(), fmt.Sprintf("the version to go to, 0 to %d, rolling back when the database is past it", migrations.Latest()))
	yes := fs.Bool("yes", false, "confirm a rollback to 0, which drops fila_jobs and every job in it, or one that live workers would not survive")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *to < 0 || *to > migrations.Latest() {
		return fmt.Errorf("--to %d out of range: this fila has versions 0 (no tables) to %d", *to, migrations.Latest())
	}
	target := *to
	if target == 0 && !*yes {
		return errors.New("--to 0 drops fila_jobs and every job in it: add --yes to do it")
	}
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	current, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	if current > target {
		if !*yes {
			if err := noLiveWorkers(ctx, pool, current); err != nil {
				return err
			}
		}
		undone, err := migrations.RollbackIn(ctx, pool, g.schema, target)
		if err != nil {
			return err
		}
		g.log().Info("migrations rolled back", zap.Ints("versions", undone))
		fmt.Fprintf(g.stdout, "rolled back %s; now at version %d\n", listVersions(undone), target)
		return nil
	}
	applied, err := migrations.MigrateIn(ctx, pool, g.schema, target)
	if err != nil {
		return err
	}
	// Say what happened: a second run changes nothing, and says so.
	if len(applied) == 0 {
		g.log().Info("database already at the version asked for", zap.Int("version", target))
		fmt.Fprintf(g.stdout, "already at version %d; nothing to do\n", target)
		return nil
	}
	g.log().Info("migrations applied", zap.Ints("versions", applied))
	fmt.Fprintf(g.stdout, "applied %s; now at version %d\n", listVersions(applied), target)
	return nil
}

// listVersions says "migration 3" or "migrations 3, 4".
func listVersions(vs []int) string {
	versions := make([]string, len(vs))
	for i, v := range vs {
		versions[i] = strconv.Itoa(v)
	}
	noun := "migration"
	if len(vs) > 1 {
		noun = "migrations"
	}
	return noun + " " + strings.Join(versions, ", ")
}

// liveWorkersSQL lists the live workers with how long ago each refreshed
// its row (fila_worker_live, from migration 0020); oldLiveWorkersSQL does
// for a database before it, whose workers refreshed their rows every five
// minutes. A worker removes its row when it stops.
const (
	liveWorkersSQL    = `SELECT id, extract(epoch FROM now() - last_seen_at)::float8 FROM fila_workers w WHERE fila_worker_live(w) ORDER BY id`
	oldLiveWorkersSQL = `SELECT id, extract(epoch FROM now() - last_seen_at)::float8 FROM fila_workers WHERE last_seen_at > now() - interval '10 minutes' ORDER BY id`
	livenessVersion   = 20
)

// noLiveWorkers refuses a rollback while workers run: the functions they
// call would go from under them.
func noLiveWorkers(ctx context.Context, pool *pgxpool.Pool, version int) error {
	sql := liveWorkersSQL
	if version < livenessVersion {
		sql = oldLiveWorkersSQL
	}
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: a version without fila_workers
			return nil
		}
		return fmt.Errorf("list live workers: %w", err)
	}
	type seen struct {
		id   string
		secs float64
	}
	live, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (seen, error) {
		var s seen
		err := r.Scan(&s.id, &s.secs)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("list live workers: %w", err)
	}
	switch len(live) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("worker %s is live (its row was refreshed %s ago): stop it before rolling back, or add --yes if it is gone",
			live[0].id, seconds(live[0].secs))
	}
	ids := make([]string, len(live))
	for i, w := range live {
		ids[i] = w.id
	}
	return fmt.Errorf("%d workers are live (%s): stop them before rolling back, or add --yes if they are gone",
		len(live), strings.Join(ids, ", "))
}
