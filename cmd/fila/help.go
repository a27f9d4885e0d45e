package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
)

func init() {
	register("help", "show the commands, or one command's flags: help [command]", runHelp)
	describeArgs("help", "[command [subcommand]]")
	register("version", "print fila's version", runVersion)
}

// runHelp prints to stdout what -h prints to stderr, and exits 0: it is what
// was asked for, not a mistake.
func runHelp(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("help", flag.ContinueOnError)
	topics, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(topics) == 0 {
		top := flag.NewFlagSet("fila", flag.ContinueOnError)
		top.SetOutput(g.stdout)
		(&globals{}).addFlags(top)
		usage(g.stdout, top)
		return nil
	}
	cmd, ok := commands[topics[0]]
	if !ok {
		return fmt.Errorf("unknown command %q (run fila help for the list)", topics[0])
	}
	h := *g
	h.name = topics[0]
	h.stderr = g.stdout
	err = cmd.run(ctx, &h, append(topics[1:], "-h"))
	if err == nil || err == flag.ErrHelp {
		return nil
	}
	return err
}

func runVersion(_ context.Context, g *globals, args []string) error {
	if err := g.parse(flag.NewFlagSet("version", flag.ContinueOnError), args); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "fila %s\n", version())
	return nil
}

// version is the module version the binary was built at: a tag or
// pseudo-version for `go install …@version` and builds in a clone, or
// "(devel)" with the commit when the build has no version of its own.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if v == "(devel)" {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = ", modified"
			}
		}
		if rev != "" {
			v += " (commit " + rev + dirty + ")"
		}
	}
	return v
}
