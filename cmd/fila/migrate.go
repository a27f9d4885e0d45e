package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/fila-run/fila/migrations"
)

func init() {
	register("migrate", "create or upgrade Fila's tables (safe to run twice, and several at once)", runMigrate)
}

func runMigrate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := migrations.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	// Say what happened: a second run changes nothing, and says so.
	if len(applied) == 0 {
		g.log().Info("database already at the latest migration", zap.Int("version", migrations.Latest()))
		fmt.Fprintf(g.stdout, "already at version %d; nothing to do\n", migrations.Latest())
		return nil
	}
	g.log().Info("migrations applied", zap.Ints("versions", applied))
	versions := make([]string, len(applied))
	for i, v := range applied {
		versions[i] = strconv.Itoa(v)
	}
	noun := "migration"
	if len(applied) > 1 {
		noun = "migrations"
	}
	fmt.Fprintf(g.stdout, "applied %s %s; now at version %d\n", noun, strings.Join(versions, ", "), migrations.Latest())
	return nil
}
