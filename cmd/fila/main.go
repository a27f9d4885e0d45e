// Command fila migrates the database, enqueues jobs, runs workers (for Go
// handlers' demos or for programs in any language through --exec), reports
// queue statistics and runs the benchmark suite.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; each lives in its own file.
func register(name, summary string, run func(ctx context.Context, g *globals, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitUsage is the exit code of a command line that cannot be understood.
const exitUsage = 2

func run(args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("fila", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.addFlags(fs)
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr, fs)
		return exitUsage
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "fila: unknown command %q (run fila -h for the list)\n", rest[0])
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, g, rest[1:])
	g.sync()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return exitUsage
	default:
		fmt.Fprintf(stderr, "fila %s: %s\n", rest[0], oneLineError(err))
		return 1
	}
}

// oneLineError folds a multi-line error (pgx lists every address it tried
// on lines of their own) into the one line a command prints.
func oneLineError(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// errUsage means the flag package already printed what was wrong.
var errUsage = errors.New("usage")

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: fila [--dsn DSN] [--listen-dsn DSN] <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nRun fila <command> -h for a command's flags.")
}

// parse parses a subcommand's flags, which also accept the global ones. A
// mistake is one line naming it; -h prints every flag.
func (g *globals) parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	g.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(g.stderr)
			fmt.Fprintf(g.stderr, "usage: fila %s [flags]\n", fs.Name())
			fs.PrintDefaults()
			return err
		}
		fmt.Fprintf(g.stderr, "fila %s: %v (run fila %s -h for its flags)\n", fs.Name(), err, fs.Name())
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(g.stderr, "fila %s: unexpected argument %q (run fila %s -h for its flags)\n", fs.Name(), fs.Arg(0), fs.Name())
		return errUsage
	}
	return nil
}
