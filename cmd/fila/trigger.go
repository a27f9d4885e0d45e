package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/fila-run/fila/runtime"
)

func init() {
	register("trigger", "show or switch the insert trigger's NOTIFY: trigger [on|off] (off once every worker runs --mode wal)", runTrigger)
	describeArgs("trigger", "[on|off]")
}

func runTrigger(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("trigger", flag.ContinueOnError)
	pos, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	var want string
	switch {
	case len(pos) > 1:
		return g.usageError("unexpected argument %q", pos[1])
	case len(pos) == 1 && pos[0] != "on" && pos[0] != "off":
		return g.usageError("%q is neither on nor off", pos[0])
	case len(pos) == 1:
		want = pos[0]
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if want != "" {
		if err := runtime.SetNotifyTrigger(ctx, pool, want == "on"); err != nil {
			return err
		}
	}
	on, err := runtime.NotifyTriggerOn(ctx, pool)
	if err != nil {
		return err
	}
	state := "off (workers must run --mode wal or poll)"
	if on {
		state = "on"
	}
	fmt.Fprintf(g.stdout, "notify trigger: %s\n", state)
	return nil
}
