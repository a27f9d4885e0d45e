// Command fila migrates the database, enqueues and manages jobs, runs workers
// (for Go handlers' demos or for programs in any language through --exec),
// reports queue statistics and runs the benchmark suite.
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
	"time"

	"github.com/fila-run/fila/internal/execguard"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

var commands = map[string]command{}

// argsUsage holds the positional arguments a command's usage line shows
// after its name ("trigger" → "[on|off]", "jobs show" → "ID").
var argsUsage = map[string]string{}

// register adds a subcommand; each lives in its own file.
func register(name, summary string, run func(ctx context.Context, g *globals, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// describeArgs sets the positional arguments shown in a command's usage line.
func describeArgs(name, args string) { argsUsage[name] = args }

func main() {
	if len(os.Args) > 1 && os.Args[1] == execGuardCommand {
		// Not a command of the list: the worker's own, first, because it is
		// on the pickup path of every --exec job.
		os.Exit(execguard.Main())
	}
	ownProcess = true
	os.Exit(runIO(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// ownProcess says the command runs as a process of its own, not inside
// another program (a test) that runs it in-process: only then may `fila
// work` take every child that is not a guard for an orphan to kill (see
// adoptOrphans).
var ownProcess bool

// exitUsage is the exit code of a command line that cannot be understood.
const exitUsage = 2

func run(args []string, stdout, stderr io.Writer) int {
	return runIO(args, os.Stdin, stdout, stderr)
}

// runIO runs one command line; stdin is read only by `enqueue --payload -`.
func runIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("fila", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a mistake is one line, below; -h the usage
	g.addFlags(fs)
	showVersion := fs.Bool("version", false, "print fila's version, and the database's schema version when a DSN is given; the same as fila version")
	if err := fs.Parse(args); err != nil {
		fs.SetOutput(stderr)
		if errors.Is(err, flag.ErrHelp) {
			usage(stderr, fs)
			return 0
		}
		fmt.Fprintf(stderr, "fila: %v (run fila help)\n", err)
		return exitUsage
	}
	rest := fs.Args()
	if *showVersion {
		rest = append([]string{"version"}, rest...)
	}
	if len(rest) == 0 {
		fs.SetOutput(stderr)
		usage(stderr, fs)
		return exitUsage
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "fila: unknown command %q (run fila help for the list)\n", rest[0])
		return exitUsage
	}
	ctx, stop := g.watchSignals()
	defer stop()
	g.name = rest[0]
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
		errs := []error{err}
		if list, ok := err.(errorList); ok {
			errs = list // a configuration's mistakes, one a line
		}
		for _, err := range errs {
			fmt.Fprintf(stderr, "fila %s: %s\n", g.name, oneLineError(err))
		}
		return 1
	}
}

// watchSignals returns a context that the first SIGINT or SIGTERM cancels;
// the signals after it go to g.laterSignals, for a command (work) to which a
// second signal means more than the first.
// hardStopGap is how long after the first SIGTERM/SIGINT another one
// counts as a second signal, a hard stop: one that comes at the same
// instant is the same stop, sent to the process and to its group (as
// `timeout` does), not an operator asking twice.
const hardStopGap = 100 * time.Millisecond

func (g *globals) watchSignals() (context.Context, func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	later := make(chan os.Signal, 1)
	g.laterSignals = later
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		first := time.Now()
		for {
			select {
			case s := <-sigs:
				if time.Since(first) < hardStopGap {
					// The same stop, delivered twice: `timeout` and a
					// terminal signal both the process and its group.
					continue
				}
				select {
				case later <- s:
				default: // one unread is enough
				}
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// oneLineError folds a multi-line error (pgx lists every address it tried
// on lines of their own) into the one line a command prints, without the
// "fila: " or "fila config: " the packages put before their errors: the
// line already starts with "fila <command>: ".
func oneLineError(err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	for _, p := range []string{"fila config: ", "fila: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// errUsage means the command already printed what was wrong with its
// command line.
var errUsage = errors.New("usage")

// usageError prints one line naming what is wrong with the command line,
// with where to find the flags, and returns errUsage.
func (g *globals) usageError(format string, args ...any) error {
	fmt.Fprintf(g.stderr, "fila %s: %s (run fila help %s)\n", g.name, fmt.Sprintf(format, args...), g.name)
	return errUsage
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: fila [--dsn DSN] [--listen-dsn DSN] [--schema S] <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags (accepted before or after the command):")
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nRun fila help <command> for a command's flags.")
}

// parse parses a command's flags, which also accept the global ones, and
// refuses positional arguments.
func (g *globals) parse(fs *flag.FlagSet, args []string) error {
	rest, err := g.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return g.usageError("unexpected argument %q", rest[0])
	}
	return nil
}

// parseArgs parses a command's flags, which may come before, between or
// after its positional arguments, and returns the positional ones. A
// mistake is one line naming it; -h prints the usage line and every flag.
// A lone "--" ends the flags.
func (g *globals) parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	g.addFlags(fs)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				g.printUsage(fs)
				return nil, err
			}
			return nil, g.usageError("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// flag stops at the first positional argument, or just after a
		// "--", after which everything is positional.
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if err := g.checkLogFlags(); err != nil {
		return nil, g.usageError("%v", err)
	}
	return positional, nil
}

// printUsage writes a command's usage line and flags to stderr.
func (g *globals) printUsage(fs *flag.FlagSet) {
	fs.SetOutput(g.stderr)
	line := "fila " + fs.Name()
	if a := argsUsage[fs.Name()]; a != "" {
		line += " " + a
	}
	fmt.Fprintf(g.stderr, "usage: %s [flags]\n", line)
	fs.PrintDefaults()
}
