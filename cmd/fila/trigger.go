package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/fila-run/fila/runtime"
)

func init() {
	register("trigger", "show or switch the insert trigger's NOTIFY: trigger [on|off] (off once every worker runs --mode wal)", runTrigger)
}

func runTrigger(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("trigger", flag.ContinueOnError)
	var want string
	if len(args) > 0 && (args[0] == "on" || args[0] == "off") {
		want, args = args[0], args[1:]
	}
	if err := g.parse(fs, args); err != nil {
		return err
	}
	pool, err := g.pool(ctx)
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
