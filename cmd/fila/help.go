package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/fila-run/fila/migrations"
)

func init() {
	register("help", "show the commands, or one command's flags: help [command]", runHelp)
	describeArgs("help", "[command [subcommand]]")
	register("version", "print fila's version and schema version, and the database's given a DSN (also fila --version)", runVersion)
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

func runVersion(ctx context.Context, g *globals, args []string) error {
	if err := g.parse(flag.NewFlagSet("version", flag.ContinueOnError), args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	for _, line := range versionLines(bi) {
		fmt.Fprintln(g.stdout, line)
	}
	want := migrations.Latest()
	fmt.Fprintf(g.stdout, "schema version %d: the migrations this fila applies and needs\n", want)
	if !g.dsnGiven() {
		fmt.Fprintln(g.stdout, "database: not checked (give --dsn or set FILA_DSN to compare its schema)")
		return nil
	}
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	v, err := migrations.Version(ctx, pool)
	if err != nil {
		return fmt.Errorf("read the database's schema version: %w", err)
	}
	var state string
	switch {
	case v == 0:
		state = "no Fila tables: run `fila migrate`"
	case v < want:
		state = "older than this fila's: run `fila migrate`"
	case v > want:
		state = fmt.Sprintf("newer than this fila's: upgrade fila, or go back with the newer one (fila migrate --to %d)", want)
	default:
		state = "up to date"
	}
	fmt.Fprintf(g.stdout, "database schema version %d at %s: %s\n", v, describe(pool.Config()), state)
	return nil
}

// versionLines say which fila this is: its module version (a tag or
// pseudo-version for `go install …@version`, "(devel)" for a build in a
// clone), the commit it was built from when the build recorded it, and the
// Go that built it.
func versionLines(bi *debug.BuildInfo) []string {
	if bi == nil {
		return []string{"fila (devel)", "commit unknown: the binary carries no build information"}
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			modified = ", with changes not committed"
		}
	}
	if rev == "" {
		// A pseudo-version (v0.0.0-20260102150405-0123456789ab) ends with
		// the commit's first 12 hex digits.
		base := strings.TrimSuffix(v, "+dirty")
		if i := strings.LastIndex(base, "-"); i >= 0 && len(base)-i-1 == 12 && strings.Count(base, "-") >= 2 {
			rev = base[i+1:]
		}
	}
	commit := "commit unknown: built without version control information"
	if rev != "" {
		commit = "commit " + rev[:min(len(rev), 12)] + modified
	}
	return []string{"fila " + v, commit, "built with " + bi.GoVersion}
}
