package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/fila-run/fila/migrations"
)

func init() {
	register("migrate", "create or upgrade Fila's tables (safe to run twice, and several at once); --to N goes to version N, down too", runMigrate)
}

func runMigrate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	to := fs.Int("to", migrations.Latest(), fmt.Sprintf("the version to go to, 0 to %d, rolling back when the database is past it", migrations.Latest()))
	yes := fs.Bool("yes", false, "confirm --to 0, which drops fila_jobs and every job in it")
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
		undone, err := migrations.Rollback(ctx, pool, target)
		if err != nil {
			return err
		}
		g.log().Info("migrations rolled back", zap.Ints("versions", undone))
		fmt.Fprintf(g.stdout, "rolled back %s; now at version %d\n", listVersions(undone), target)
		return nil
	}
	applied, err := migrations.MigrateTo(ctx, pool, target)
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
