package main

import (
	"context"
	"flag"
	"fmt"

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
	if len(applied) == 0 {
		g.log().Info("database already at the latest migration", zap.Int("version", migrations.Latest()))
	} else {
		g.log().Info("migrations applied", zap.Ints("versions", applied))
	}
	fmt.Fprintf(g.stdout, "migrated to version %d\n", migrations.Latest())
	return nil
}
