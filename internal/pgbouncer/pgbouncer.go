// Package pgbouncer starts a PgBouncer in front of a PostgreSQL, for tests
// and fault injection.
//
// Fila's main DSN may point at PgBouncer in transaction mode, where a client
// connection owns a server connection only for one transaction: no session
// state, no named prepared statements carried over. Tests that must prove
// Fila works there, or survives the pooler being killed and restarted, start
// their own PgBouncer with this package (the shared one of scripts/setup.sh
// on port 6432 must never be killed by a test).
//
// The bouncer is the Debian pgbouncer binary, run in the foreground as the
// postgres user when we are root (it refuses root), from an ini written into
// a fila-pgbouncer-* temp dir. It routes every database name to the same
// upstream (a wildcard entry), so each test's own database works through it,
// and trusts the postgres user. It dies with the test binary (Pdeathsig).
package pgbouncer

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

// ErrNotInstalled means the pgbouncer binary was not found.
var ErrNotInstalled = errors.New("pgbouncer is not installed")

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("pgbouncer: closed")

// Defaults of Options.
const (
	UpstreamHostDefault  = "127.0.0.1"
	UpstreamPortDefault  = 5432
	PoolModeDefault      = "transaction"
	PoolSizeDefault      = 20
	MaxClientConnDefault = 500
)

// systemBinary is where Debian's package installs pgbouncer (outside a
// non-root user's PATH).
const systemBinary = "/usr/sbin/pgbouncer"

// Options configure a bouncer.
type Options struct {
	// Port is the loopback TCP port to listen on. Defaults to a free port
	// picked at start (0).
	Port int
	// UpstreamHost is the PostgreSQL host every database is routed to.
	// Defaults to UpstreamHostDefault.
	UpstreamHost string
	// UpstreamPort is the PostgreSQL port. Defaults to UpstreamPortDefault.
	UpstreamPort int
	// PoolMode is session, transaction or statement. Defaults to PoolModeDefault.
	PoolMode string
	// PoolSize is default_pool_size: server connections per database and
	// user. Defaults to PoolSizeDefault.
	PoolSize int
	// MaxClientConn bounds client connections. Defaults to MaxClientConnDefault.
	MaxClientConn int
	// Settings are extra [pgbouncer] ini settings (server_idle_timeout,
	// query_wait_timeout, …); they override the defaults written here.
	// Defaults to none.
	Settings map[string]string
	// Binary is the pgbouncer executable. Defaults to pgbouncer on PATH,
	// else /usr/sbin/pgbouncer.
	Binary string
	// Logger receives start and stop events. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy with every unset field filled.
func (o Options) WithDefaults() Options {
	if o.UpstreamHost == "" {
		o.UpstreamHost = UpstreamHostDefault
	}
	if o.UpstreamPort == 0 {
		o.UpstreamPort = UpstreamPortDefault
	}
	if o.PoolMode == "" {
		o.PoolMode = PoolModeDefault
	}
	if o.PoolSize == 0 {
		o.PoolSize = PoolSizeDefault
	}
	if o.MaxClientConn == 0 {
		o.MaxClientConn = MaxClientConnDefault
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("pgbouncer: Port %d out of range 0 (pick a free one) to 65535", o.Port)
	}
	if o.UpstreamPort < 0 || o.UpstreamPort > 65535 {
		return fmt.Errorf("pgbouncer: UpstreamPort %d out of range 1 to 65535", o.UpstreamPort)
	}
	switch o.PoolMode {
	case "", "session", "transaction", "statement":
	default:
		return fmt.Errorf("pgbouncer: PoolMode %q is not session, transaction or statement", o.PoolMode)
	}
	if o.PoolSize < 0 {
		return fmt.Errorf("pgbouncer: PoolSize %d must be at least 1", o.PoolSize)
	}
	if o.MaxClientConn < 0 {
		return fmt.Errorf("pgbouncer: MaxClientConn %d must be at least 1", o.MaxClientConn)
	}
	for k := range o.Settings {
		switch k {
		case "listen_addr", "listen_port", "unix_socket_dir", "logfile", "pidfile", "auth_file", "auth_type":
			return fmt.Errorf("pgbouncer: Settings[%q] is fixed by the package (use Port for the port)", k)
		}
	}
	return nil
}

// Bouncer is a running (or stopped) PgBouncer.
type Bouncer struct {
	log    *zap.Logger
	owner  *proc.Owner
	binary string
	opts   Options
	dir    string
	ini    string
	// tracksExtra: the binary knows track_extra_parameters (1.20+).
	tracksExtra bool
	logPath     string
	stderrPath  string
	port        int

	mu     sync.Mutex
	server *proc.Process // nil once stopped
	closed bool
}

// Start writes a configuration into a new temporary directory, starts
// PgBouncer and returns once it accepts connections (or ctx ends). The
// upstream need not be up: readiness is checked on PgBouncer's admin console.
func Start(ctx context.Context, opts Options) (*Bouncer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	binary, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	owner, err := proc.CurrentOwner()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	dir, err := os.MkdirTemp("", "fila-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	b := &Bouncer{
		log:        opts.Logger.Named("pgbouncer"),
		owner:      owner,
		binary:     binary,
		opts:       opts,
		dir:        dir,
		ini:        filepath.Join(dir, "pgbouncer.ini"),
		logPath:    filepath.Join(dir, "pgbouncer.log"),
		stderrPath: filepath.Join(dir, "stderr.log"),
		port:       opts.Port,
	}
	b.tracksExtra = tracksExtraParameters(binary)
	if err := b.writeAuthFile(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// A picked port can be taken between picking and binding: pick again.
	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			if b.port, err = proc.FreePort(); err != nil {
				break
			}
		}
		if err = b.writeIni(); err != nil {
			break
		}
		err = b.start(ctx)
		if err == nil || opts.Port != 0 || attempt == 3 || !strings.Contains(b.LogTail(), "in use") {
			break
		}
		b.log.Warn("port taken, picking another", zap.Int("port", b.port))
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

func findBinary(binary string) (string, error) {
	hint := "run scripts/setup.sh to install it"
	if binary != "" {
		if _, err := os.Stat(binary); err != nil {
			return "", fmt.Errorf("pgbouncer: %w (%v); %s", ErrNotInstalled, err, hint)
		}
		return binary, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(systemBinary); err == nil {
		return systemBinary, nil
	}
	return "", fmt.Errorf("pgbouncer: %w (not on PATH nor at %s); %s", ErrNotInstalled, systemBinary, hint)
}

// TrackExtraParameters is the track_extra_parameters Fila's bouncers set
// (and scripts/setup.sh's): PgBouncer's default, IntervalStyle, and the
// search_path a schema sets.
const TrackExtraParameters = "IntervalStyle,search_path"

// TracksExtraParameters reports whether the bouncer sets
// track_extra_parameters (TrackExtraParameters): its binary is 1.20 or
// later. Before, it refuses a search_path startup parameter.
func (b *Bouncer) TracksExtraParameters() bool { return b.tracksExtra }

// tracksExtraParameters reports whether the pgbouncer binary knows
// track_extra_parameters (1.20 and later), from its --version.
func tracksExtraParameters(binary string) bool {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return false
	}
	major, minor, ok := parseVersion(string(out))
	return ok && (major > 1 || major == 1 && minor >= 20)
}

// parseVersion reads "PgBouncer 1.18.0" from the first line of --version.
func parseVersion(out string) (major, minor int, ok bool) {
	line, _, _ := strings.Cut(out, "\n")
	_, v, found := strings.Cut(line, "PgBouncer ")
	if !found {
		return 0, 0, false
	}
	parts := strings.SplitN(strings.TrimSpace(v), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

func (b *Bouncer) writeAuthFile() error {
	if err := b.owner.Chown(b.dir); err != nil {
		return fmt.Errorf("pgbouncer: chown %s: %w", b.dir, err)
	}
	// auth_type=trust still requires the user to be listed.
	return b.writeFile("userlist.txt", `"postgres" ""`+"\n")
}

func (b *Bouncer) writeIni() error {
	settings := map[string]string{
		"pool_mode":                 b.opts.PoolMode,
		"default_pool_size":         strconv.Itoa(b.opts.PoolSize),
		"max_client_conn":           strconv.Itoa(b.opts.MaxClientConn),
		"admin_users":               "postgres",
		"server_reset_query":        "",
		"ignore_startup_parameters": "extra_float_digits,options",
		// After a failed login (PostgreSQL restarting) PgBouncer waits this
		// many seconds before trying again; the default 15 s would turn a
		// 2 s restart into a 15 s outage.
		"server_login_retry": "1",
	}
	// A schema's search_path (runtime.Config.Schema) is a startup
	// parameter: PgBouncer 1.20 and later restore it on the server
	// connection of each client's transaction once it is tracked. Ignoring
	// it instead would hand the statements a server connection with
	// another client's path. Before 1.20 the setting does not exist, and
	// PgBouncer refuses the parameter, which Fila reports as such.
	if b.tracksExtra {
		settings["track_extra_parameters"] = TrackExtraParameters
	}
	for k, v := range b.opts.Settings {
		settings[k] = v
	}
	settings["listen_addr"] = "127.0.0.1"
	settings["listen_port"] = strconv.Itoa(b.port)
	settings["unix_socket_dir"] = ""
	settings["auth_type"] = "trust"
	settings["auth_file"] = filepath.Join(b.dir, "userlist.txt")
	settings["logfile"] = b.logPath
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var ini strings.Builder
	fmt.Fprintf(&ini, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", b.opts.UpstreamHost, b.opts.UpstreamPort)
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	return b.writeFile("pgbouncer.ini", ini.String())
}

func (b *Bouncer) writeFile(name, content string) error {
	path := filepath.Join(b.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	if err := b.owner.Chown(path); err != nil {
		return fmt.Errorf("pgbouncer: chown %s: %w", path, err)
	}
	return nil
}

// start runs pgbouncer and waits until it accepts connections. The caller
// holds b.mu or has not shared b yet.
func (b *Bouncer) start(ctx context.Context) error {
	// pgbouncer writes its own logfile; stderr catches what it prints before
	// it has read where that is.
	stderr, err := os.OpenFile(b.stderrPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgbouncer: %w", err)
	}
	defer stderr.Close() // the child holds its own descriptor
	cmd := b.owner.Command(b.binary, "-q", b.ini)
	cmd.Dir = b.dir
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	server, err := proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgbouncer: start: %w", err)
	}
	if err := b.waitReady(ctx, server); err != nil {
		_ = server.Stop(syscall.SIGKILL, 0)
		return err
	}
	b.server = server
	b.log.Info("started", zap.Int("port", b.port), zap.Int("pid", server.Pid()),
		zap.String("upstream", fmt.Sprintf("%s:%d", b.opts.UpstreamHost, b.opts.UpstreamPort)))
	return nil
}

var errForeign = errors.New("another server answers on the port")

// waitReady connects to the admin console until it answers as this bouncer,
// the process exits or ctx ends.
func (b *Bouncer) waitReady(ctx context.Context, server *proc.Process) error {
	retry := time.NewTimer(0)
	defer retry.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer: not ready on port %d: %w (last error: %v)\n%s", b.port, ctx.Err(), lastErr, b.LogTail())
		case <-server.Done():
			return fmt.Errorf("pgbouncer: exited during start: %v\n%s", server.Err(), b.LogTail())
		case <-retry.C:
		}
		lastErr = b.ping(ctx)
		if lastErr == nil {
			return nil
		}
		if errors.Is(lastErr, errForeign) {
			return lastErr
		}
		retry.Reset(20 * time.Millisecond)
	}
}

// ping checks that the admin console answers and reports our logfile, which
// tells our bouncer from another one that took a picked port.
func (b *Bouncer) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, b.DSN("pgbouncer"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := conn.Exec(ctx, "SHOW CONFIG").ReadAll()
	if err != nil {
		return fmt.Errorf("pgbouncer: %w %d: %v", errForeign, b.port, err)
	}
	for _, r := range res {
		for _, row := range r.Rows {
			if len(row) >= 2 && string(row[0]) == "logfile" {
				if string(row[1]) == b.logPath {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("pgbouncer: %w %d", errForeign, b.port)
}

// DSN returns a URL connecting to dbname through this bouncer as postgres.
// The database "pgbouncer" is the admin console (SHOW POOLS, …).
func (b *Bouncer) DSN(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, dbname)
}

// Port returns the TCP port; it stays the same across restarts.
func (b *Bouncer) Port() int { return b.port }

// Dir returns the temporary directory holding the ini, auth file and logs.
func (b *Bouncer) Dir() string { return b.dir }

// PID returns the process id, or 0 when stopped.
func (b *Bouncer) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.runningLocked() {
		return 0
	}
	return b.server.Pid()
}

func (b *Bouncer) runningLocked() bool {
	if b.server == nil {
		return false
	}
	select {
	case <-b.server.Done():
		return false
	default:
		return true
	}
}

// LogTail returns the end of PgBouncer's log (and anything it printed on
// stderr), for failure messages.
func (b *Bouncer) LogTail() string {
	return proc.Tail(b.stderrPath, 2<<10) + proc.Tail(b.logPath, 8<<10)
}

// Stop kills PgBouncer (SIGKILL): every client connection breaks at once,
// as when a pooler crashes. Stopping a stopped bouncer does nothing.
func (b *Bouncer) Stop() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopLocked()
}

func (b *Bouncer) stopLocked() error {
	if b.server == nil {
		return nil
	}
	server := b.server
	b.server = nil
	if err := server.Stop(syscall.SIGKILL, 0); err != nil {
		return fmt.Errorf("pgbouncer: kill: %w", err)
	}
	b.log.Info("stopped", zap.Int("port", b.port))
	return nil
}

// Start starts a stopped bouncer again on the same port and waits until it
// accepts connections. Starting a running bouncer does nothing.
func (b *Bouncer) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if b.runningLocked() {
		return nil
	}
	b.server = nil
	return b.start(ctx)
}

// Restart kills PgBouncer and starts it again on the same port.
func (b *Bouncer) Restart(ctx context.Context) error {
	if err := b.Stop(); err != nil {
		return err
	}
	return b.Start(ctx)
}

// Close kills PgBouncer and removes its directory. It is safe to call more
// than once.
func (b *Bouncer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	stopErr := b.stopLocked()
	rmErr := os.RemoveAll(b.dir)
	if rmErr != nil {
		rmErr = fmt.Errorf("pgbouncer: remove %s: %w", b.dir, rmErr)
	}
	return errors.Join(stopErr, rmErr)
}
