package patroni

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/pgcluster/proc"
)

// ErrNotInstalled is wrapped by Start's error when Patroni, etcd or the
// PostgreSQL server binaries are missing (scripts/setup.sh installs them).
var ErrNotInstalled = errors.New("patroni, etcd or the PostgreSQL server binaries are not installed (Debian packages patroni, etcd-server, postgresql)")

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("patroni: cluster closed")

// Where Debian's packages install the daemons. Patroni is run by its path,
// so its shebang picks Debian's /usr/bin/python3, for which its modules are
// installed, whatever python3 comes first on PATH.
const (
	PatroniBinDefault = "/usr/bin/patroni"
	EtcdBinDefault    = "/usr/bin/etcd"
)

// Nodes is the number of PostgreSQL nodes: a primary and its synchronous
// standby.
const Nodes = 2

// closeLimit bounds Close's wait for the guard's cleanup.
const closeLimit = 30 * time.Second

// Options configure a cluster.
type Options struct {
	// Settings are extra PostgreSQL settings of both nodes; they override the
	// defaults (wal_level=logical, max_wal_senders=20,
	// max_replication_slots=20, max_connections=200, fsync=off, …). The
	// settings each node or Patroni decides (listen_addresses, port,
	// unix_socket_directories, synchronous_standby_names, …) cannot be set.
	// Defaults to none.
	Settings map[string]string
	// BinDir holds the PostgreSQL server binaries. Defaults to
	// pgcluster.FindBinDir's (the highest /usr/lib/postgresql/*/bin).
	BinDir string
	// PatroniBin is the patroni executable. Defaults to PatroniBinDefault.
	PatroniBin string
	// EtcdBin is the etcd executable. Defaults to EtcdBinDefault.
	EtcdBin string
	// Logger receives start and stop events. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// Validate reports the first invalid option.
func (o Options) Validate() error {
	for k := range o.Settings {
		if slices.Contains(fixedParameters, k) {
			return fmt.Errorf("patroni: Settings[%q] is decided by the cluster", k)
		}
	}
	return nil
}

// WithDefaults returns a copy of o with its zero fields filled in, except
// BinDir, which Start looks for.
func (o Options) WithDefaults() Options {
	if o.PatroniBin == "" {
		o.PatroniBin = PatroniBinDefault
	}
	if o.EtcdBin == "" {
		o.EtcdBin = EtcdBinDefault
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Cluster is a running throwaway Patroni cluster.
type Cluster struct {
	log      *zap.Logger
	owner    *proc.Owner
	bin      string // PostgreSQL server binaries
	patroni  string // executables
	etcdBin  string
	dir      string
	scope    string
	etcdPort int
	etcd     *proc.Process
	nodes    []*node
	guard    *guard
	http     *http.Client

	mu     sync.Mutex
	closed bool
}

// node is one Patroni daemon and the PostgreSQL it manages.
type node struct {
	name    string
	dir     string
	data    string
	logPath string
	pgPort  int
	apiPort int
	patroni *proc.Process
}

// Start creates a cluster in a new temporary directory and returns once a
// primary accepts writes and the other node streams from it as its
// synchronous standby, or when ctx ends.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	for _, bin := range []string{opts.PatroniBin, opts.EtcdBin} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("patroni: %w: %s", ErrNotInstalled, err)
		}
	}
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = pgcluster.FindBinDir(); err != nil {
			return nil, fmt.Errorf("patroni: %w: %w", ErrNotInstalled, err)
		}
	}
	for _, tool := range []string{"initdb", "postgres", "pg_basebackup", "pg_rewind"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return nil, fmt.Errorf("patroni: %w: %s", ErrNotInstalled, err)
		}
	}
	owner, err := proc.CurrentOwner()
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	dir, err := os.MkdirTemp("", "fila-patroni-")
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	c := &Cluster{
		log: opts.Logger.Named("patroni"), owner: owner, bin: bin, dir: dir,
		patroni: opts.PatroniBin, etcdBin: opts.EtcdBin,
		scope: "fila-" + hex.EncodeToString(b[:]),
		http:  &http.Client{Timeout: 3 * time.Second},
	}
	if c.guard, err = startGuard(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("patroni: %w", err)
	}
	started := time.Now()
	if err := c.start(ctx, opts.Settings); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.LogTail())
		return nil, errors.Join(err, c.Close())
	}
	leader, _ := c.Leader(ctx)
	c.log.Info("started", zap.String("dir", dir), zap.String("leader", leader.Name),
		zap.String("dsn", c.DSN("postgres")), zap.Duration("took", time.Since(started)))
	return c, nil
}

func (c *Cluster) start(ctx context.Context, settings map[string]string) error {
	if err := c.owner.Chown(c.dir); err != nil {
		return fmt.Errorf("patroni: chown %s: %w", c.dir, err)
	}
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	for i := range Nodes {
		n := &node{name: "n" + strconv.Itoa(i+1)}
		n.dir = filepath.Join(c.dir, n.name)
		n.data = filepath.Join(n.dir, "data")
		n.logPath = filepath.Join(n.dir, "patroni.log")
		var err error
		if n.pgPort, err = proc.FreePort(); err != nil {
			return err
		}
		if n.apiPort, err = proc.FreePort(); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	// Both at once: the first to take the initialize key runs initdb, the
	// other waits for it and clones it with pg_basebackup.
	for _, n := range c.nodes {
		if err := c.startNode(n, settings); err != nil {
			return err
		}
	}
	_, _, err := c.WaitSynced(ctx)
	return err
}

// exited returns an error naming a daemon of the cluster that has exited,
// or nil while they all run. The Wait methods give up on it: nothing comes
// back without it.
func (c *Cluster) exited() error {
	for _, n := range c.nodes {
		if n.patroni == nil {
			continue
		}
		select {
		case <-n.patroni.Done():
			return fmt.Errorf("patroni: Patroni of %s exited: %v", n.name, n.patroni.Err())
		default:
		}
	}
	if c.etcd != nil {
		select {
		case <-c.etcd.Done():
			return fmt.Errorf("patroni: etcd exited: %v", c.etcd.Err())
		default:
		}
	}
	return nil
}

// startEtcd starts a one-member etcd on two free loopback ports and waits
// until it answers.
func (c *Cluster) startEtcd(ctx context.Context) error {
	data := filepath.Join(c.dir, "etcd")
	logPath := filepath.Join(c.dir, "etcd.log")
	// A picked port can be taken between picking and binding: pick again.
	for attempt := 1; ; attempt++ {
		client, err := proc.FreePort()
		if err != nil {
			return err
		}
		peer, err := proc.FreePort()
		if err != nil {
			return err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("patroni: %w", err)
		}
		cmd := c.owner.Command(c.etcdBin,
			"--name", "etcd", "--data-dir", data,
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "etcd="+peerURL, "--initial-cluster-state", "new",
			"--initial-cluster-token", c.scope, "--log-level", "warn")
		cmd.Dir = c.dir
		cmd.Stdout, cmd.Stderr = logFile, logFile
		p, err := proc.Start(cmd)
		logFile.Close() // etcd holds its own descriptor
		if err != nil {
			return fmt.Errorf("patroni: start etcd: %w", err)
		}
		c.etcd, c.etcdPort = p, client
		err = c.waitEtcd(ctx, clientURL)
		if err == nil {
			return nil
		}
		_ = p.Stop(syscall.SIGKILL, 0)
		c.etcd = nil
		if attempt == 3 || !strings.Contains(proc.Tail(logPath, 4<<10), "address already in use") {
			return err
		}
		_ = os.RemoveAll(data)
		c.log.Warn("etcd port taken, picking others", zap.Int("client_port", client), zap.Int("peer_port", peer))
	}
}

func (c *Cluster) waitEtcd(ctx context.Context, url string) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		resp, err := c.http.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /health: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroni: etcd not ready: %w (last error: %v)", ctx.Err(), last)
		case <-c.etcd.Done():
			return fmt.Errorf("patroni: etcd exited during start: %v", c.etcd.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startNode writes node n's configuration and starts its Patroni.
func (c *Cluster) startNode(n *node, settings map[string]string) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	conf, err := c.nodeConfig(n, settings)
	if err != nil {
		return err
	}
	confPath := filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	if err := c.owner.Chown(n.dir, confPath); err != nil {
		return fmt.Errorf("patroni: chown %s: %w", n.dir, err)
	}
	logFile, err := os.OpenFile(n.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	defer logFile.Close() // Patroni, and the postmasters it starts, hold their own
	cmd := c.owner.Command(c.patroni, confPath)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Patroni's own environment variables would override the file.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PATRONI_") })
	if n.patroni, err = proc.Start(cmd); err != nil {
		return fmt.Errorf("patroni: start patroni %s: %w", n.name, err)
	}
	return nil
}

// DSN returns a multi-host URL connecting to dbname on whichever node is
// the primary now, as postgres: the client tries the nodes in turn and keeps
// the first that accepts writes (target_session_attrs=read-write).
func (c *Cluster) DSN(dbname string) string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.pgPort)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?target_session_attrs=read-write&sslmode=disable&connect_timeout=5",
		strings.Join(hosts, ","), dbname)
}

// NodeDSN returns a URL connecting to dbname on the named node only,
// whatever its role, or "" for an unknown node.
func (c *Cluster) NodeDSN(name, dbname string) string {
	for _, n := range c.nodes {
		if n.name == name {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", n.pgPort, dbname)
		}
	}
	return ""
}

// Names returns the nodes' names.
func (c *Cluster) Names() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name
	}
	return names
}

// Dir returns the temporary directory holding everything of the cluster.
func (c *Cluster) Dir() string { return c.dir }

// LogTail returns the end of every log of the cluster, for failure messages.
func (c *Cluster) LogTail() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- etcd.log\n%s\n", proc.Tail(filepath.Join(c.dir, "etcd.log"), 2<<10))
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "--- %s/patroni.log\n%s\n", n.name, proc.Tail(n.logPath, 6<<10))
	}
	return b.String()
}

// Close stops everything (nothing in the cluster is kept) and removes its
// directory. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	// Patroni first: it would start PostgreSQL again. The guard does the
	// rest, as it would if this process died.
	for _, n := range c.nodes {
		if n.patroni != nil {
			_ = n.patroni.Stop(syscall.SIGKILL, 0)
		}
	}
	c.http.CloseIdleConnections()
	err := c.guard.finish(closeLimit)
	if c.etcd != nil {
		// The guard killed it (this only waits for its exit to be reaped),
		// unless the guard itself failed.
		_ = c.etcd.Stop(syscall.SIGKILL, 0)
	}
	if left := processesOf(c.dir); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("patroni: processes of %s still running after Close: %v", c.dir, left))
	}
	if _, statErr := os.Stat(c.dir); !os.IsNotExist(statErr) {
		err = errors.Join(err, fmt.Errorf("patroni: %s not removed", c.dir))
	}
	if err != nil {
		return err
	}
	c.log.Info("closed", zap.String("dir", c.dir))
	return nil
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
