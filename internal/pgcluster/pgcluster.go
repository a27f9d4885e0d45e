// Package pgcluster starts throwaway PostgreSQL clusters from the installed
// server binaries.
//
// Two users need a PostgreSQL of their own rather than the shared one on
// 127.0.0.1:5432: `fila bench` and the demo, when no local PostgreSQL
// answers; and fault tests, which stop, restart or kill "their" PostgreSQL and
// must not disturb every other test running against the shared one.
//
// A cluster lives in a temporary directory (fila-pg-*) holding its data, its
// Unix socket and its log. It listens on loopback only, trusts every local
// connection, and runs with wal_level=logical so the logical replication
// wake source works on it too. Close stops it and removes the directory; if
// the test binary dies first, the kernel kills the server (Pdeathsig).
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/pgcluster/proc"
)

// ErrNotInstalled means no PostgreSQL server binaries (initdb, postgres) were found.
var ErrNotInstalled = errors.New("PostgreSQL server binaries (initdb, postgres) not found")

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("pgcluster: cluster closed")

// Shutdown modes for Stop and Restart, as pg_ctl names them.
const (
	// ModeSmart waits for every client to disconnect (SIGTERM).
	ModeSmart = "smart"
	// ModeFast disconnects clients and shuts down cleanly (SIGINT).
	ModeFast = "fast"
	// ModeImmediate quits at once; the next start runs crash recovery (SIGQUIT).
	ModeImmediate = "immediate"
)

var modeSignals = map[string]syscall.Signal{
	ModeSmart:     syscall.SIGTERM,
	ModeFast:      syscall.SIGINT,
	ModeImmediate: syscall.SIGQUIT,
}

// closeGrace bounds how long Close waits for an immediate shutdown before
// it kills the postmaster.
const closeGrace = 10 * time.Second

// Options configure a cluster.
type Options struct {
	// Port is the loopback TCP port to listen on. Defaults to a free port
	// picked at start (0).
	Port int
	// Settings are extra server settings passed as -c name=value; they
	// override the defaults (wal_level=logical, max_wal_senders=10,
	// max_replication_slots=10, and fsync=off when Fast). listen_addresses
	// and unix_socket_directories cannot be overridden. Defaults to none.
	Settings map[string]string
	// Fast trades durability for speed (fsync=off): a crash of the machine,
	// not of PostgreSQL, may corrupt the cluster. Defaults to false.
	Fast bool
	// BinDir holds initdb and postgres. Defaults to the highest
	// /usr/lib/postgresql/*/bin, else `pg_config --bindir`, else the
	// directory of initdb on PATH.
	BinDir string
	// Logger receives start and stop events. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("pgcluster: Port %d out of range 0 (pick a free one) to 65535", o.Port)
	}
	for k := range o.Settings {
		switch k {
		case "listen_addresses", "unix_socket_directories", "port":
			return fmt.Errorf("pgcluster: Settings[%q] is fixed by the cluster (use Port for the port)", k)
		}
	}
	return nil
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
type Cluster struct {
	log      *zap.Logger
	owner    *proc.Owner
	bin      string // directory of postgres
	dir      string // socket, log, data
	data     string
	logPath  string
	port     int
	settings []string // -c arguments

	mu     sync.Mutex
	server *proc.Process // nil once stopped
	closed bool
}

// Start creates a cluster in a new temporary directory and starts it,
// returning once it accepts connections (or ctx ends).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	for _, tool := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return nil, fmt.Errorf("pgcluster: %w: %s", ErrNotInstalled, err)
		}
	}
	owner, err := proc.CurrentOwner()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	dir, err := os.MkdirTemp("", "fila-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c := &Cluster{
		log:     log.Named("pgcluster"),
		owner:   owner,
		bin:     bin,
		dir:     dir,
		data:    filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		port:    opts.Port,
	}
	c.settings = settingArgs(opts, dir)
	if err := c.initdb(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// A picked port can be taken between picking and binding: pick again.
	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			if c.port, err = proc.FreePort(); err != nil {
				break
			}
		}
		err = c.start(ctx)
		if err == nil || opts.Port != 0 || attempt == 3 || !strings.Contains(c.LogTail(), "could not bind") {
			break
		}
		c.log.Warn("port taken, picking another", zap.Int("port", c.port))
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func settingArgs(opts Options, dir string) []string {
	s := map[string]string{
		"wal_level":             "logical",
		"max_wal_senders":       "10",
		"max_replication_slots": "10",
	}
	if opts.Fast {
		s["fsync"] = "off"
	}
	for k, v := range opts.Settings {
		s[k] = v
	}
	s["listen_addresses"] = "127.0.0.1"
	s["unix_socket_directories"] = dir
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		args = append(args, "-c", k+"="+s[k])
	}
	return args
}

// FindBinDir returns the directory of the installed PostgreSQL server
// binaries (initdb, postgres) that Options.BinDir defaults to, for other
// packages that run servers of their own (internal/patroni), or an error
// wrapping ErrNotInstalled. It looks where Debian and most packages put
// them, highest major version first.
func FindBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgcluster: %w in /usr/lib/postgresql/*/bin, `pg_config --bindir` or PATH; install the postgresql package (scripts/setup.sh does)", ErrNotInstalled)
}

func majorOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func (c *Cluster) initdb(ctx context.Context) error {
	if err := c.owner.Chown(c.dir); err != nil {
		return fmt.Errorf("pgcluster: chown %s: %w", c.dir, err)
	}
	// --locale=C: the cluster must not depend on which locales the machine
	// has generated.
	cmd := c.owner.CommandContext(ctx, filepath.Join(c.bin, "initdb"),
		"-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	return nil
}

// start runs the postmaster and waits until it accepts connections. The
// caller holds c.mu or has not shared c yet.
func (c *Cluster) start(ctx context.Context) error {
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer logFile.Close() // the server holds its own descriptor
	args := append([]string{"-D", c.data, "-p", strconv.Itoa(c.port)}, c.settings...)
	cmd := c.owner.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	server, err := proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	if err := c.waitReady(ctx, server); err != nil {
		_ = server.Stop(syscall.SIGQUIT, closeGrace)
		return err
	}
	c.server = server
	c.log.Info("started", zap.Int("port", c.port), zap.Int("pid", server.Pid()), zap.String("dir", c.dir))
	return nil
}

// waitReady connects until a connection succeeds, the server exits or ctx
// ends. It checks that the server that answered is this one: a port picked
// free may have been taken by another server meanwhile.
func (c *Cluster) waitReady(ctx context.Context, server *proc.Process) error {
	retry := time.NewTimer(0)
	defer retry.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: postgres not ready on port %d: %w (last error: %v)\n%s", c.port, ctx.Err(), lastErr, c.LogTail())
		case <-server.Done():
			return fmt.Errorf("pgcluster: postgres exited during start: %v\n%s", server.Err(), c.LogTail())
		case <-retry.C:
		}
		lastErr = c.ping(ctx)
		if lastErr == nil {
			return nil
		}
		if errors.Is(lastErr, errForeign) {
			return lastErr
		}
		retry.Reset(20 * time.Millisecond)
	}
}

var errForeign = errors.New("another PostgreSQL answers on the port")

func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := conn.Exec(ctx, "SHOW data_directory").ReadAll()
	if err != nil {
		return err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != c.data {
		return fmt.Errorf("pgcluster: %w %d", errForeign, c.port)
	}
	return nil
}

// DSN returns a URL connecting to dbname on this cluster as postgres.
func (c *Cluster) DSN(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, dbname)
}

// Port returns the TCP port; it stays the same across restarts.
func (c *Cluster) Port() int { return c.port }

// Dir returns the temporary directory holding data, socket and log.
func (c *Cluster) Dir() string { return c.dir }

// PID returns the postmaster's process id, or 0 when it is stopped. Fault
// tests use it to kill PostgreSQL without a clean shutdown.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.runningLocked() {
		return 0
	}
	return c.server.Pid()
}

func (c *Cluster) runningLocked() bool {
	if c.server == nil {
		return false
	}
	select {
	case <-c.server.Done():
		return false
	default:
		return true
	}
}

// LogTail returns the end of the server log, for failure messages.
func (c *Cluster) LogTail() string { return proc.Tail(c.logPath, 8<<10) }

// Stop shuts the server down in mode (ModeSmart, ModeFast or ModeImmediate)
// and waits for the postmaster to exit; ModeSmart waits for clients to
// disconnect first. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop(mode string) error {
	sig, ok := modeSignals[mode]
	if !ok {
		return fmt.Errorf("pgcluster: unknown shutdown mode %q (want smart, fast or immediate)", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(mode, sig, 0)
}

func (c *Cluster) stopLocked(mode string, sig syscall.Signal, grace time.Duration) error {
	if c.server == nil {
		return nil
	}
	server := c.server
	c.server = nil
	if err := server.Stop(sig, grace); err != nil {
		return fmt.Errorf("pgcluster: stop %s: %w", mode, err)
	}
	c.log.Info("stopped", zap.Int("port", c.port), zap.String("mode", mode))
	return nil
}

// Start starts a stopped cluster again on the same port and data, and waits
// until it accepts connections. Starting a running cluster does nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.runningLocked() {
		return nil
	}
	c.server = nil
	return c.start(ctx)
}

// Restart stops the cluster in mode and starts it again.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if err := c.Stop(mode); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Close stops the server (immediately: nothing in it is kept) and removes
// its directory. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	stopErr := c.stopLocked(ModeImmediate, syscall.SIGQUIT, closeGrace)
	rmErr := os.RemoveAll(c.dir)
	if rmErr != nil {
		rmErr = fmt.Errorf("pgcluster: remove %s: %w", c.dir, rmErr)
	}
	return errors.Join(stopErr, rmErr)
}
