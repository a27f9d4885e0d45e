package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/fila-run/fila/bench"
)

// The Node.js peers run in a child process, node/peer.js, driven over its
// stdin and stdout (the protocol is described at the top of that file). The
// producers, the clock and every check stay here, the same as for River: jobs
// are inserted by the Go producers inside their transactions through each
// system's SQL-level API, and the child reports on which monotonic
// nanosecond each handler began.

// Names of the Node.js peers.
const (
	systemGraphile = bench.SystemGraphileWorker
	systemPgBoss   = bench.SystemPgBoss
)

// nodeJobName is the graphile-worker task identifier and pg-boss queue of
// every job (peer.js uses the same).
const nodeJobName = "peers_noop"

// Statements of the Node.js peers, run from Go.
const (
	// graphileAddJob is graphile-worker's own transactional enqueue: the
	// add_job function its JavaScript addJob calls too. It notifies
	// "jobs:insert" on every call.
	graphileAddJob = `SELECT graphile_worker.add_job($1::text, $2::json)`
	// graphilePending counts jobs not yet done: graphile-worker deletes a
	// job when it completes.
	graphilePending = `SELECT count(*) FROM graphile_worker._private_jobs`
	// pgBossInsert is pg-boss's documented enqueue for clients that are not
	// Node.js: an INSERT into its job table naming the queue, every other
	// column at its default. It sends no notification (pg-boss has no
	// LISTEN).
	pgBossInsert = `INSERT INTO pgboss.job (name, data) VALUES ($1::text, $2::jsonb)`
	// pgBossPending counts the queue's jobs not yet completed.
	pgBossPending = `SELECT count(*) FROM pgboss.job WHERE name = $1::text AND state <> 'completed'`
)

// nodeStartTimeout bounds each step the child is asked for; a schema
// install on a busy machine takes a few seconds.
const nodeStartTimeout = 60 * time.Second

// nodeModule is where the Node.js module lives and how to run it.
type nodeModule struct {
	dir  string // bench/peers/node
	node string // the node binary
}

// nodeSetup finds node, and installs the module's packages with `npm ci`
// when node_modules is missing or older than package-lock.json. It returns
// an error that says what to run when it cannot.
func nodeSetup(ctx context.Context, dir string, log *zap.Logger) (nodeModule, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nodeModule{}, err
	}
	m := nodeModule{dir: abs}
	if _, err := os.Stat(filepath.Join(abs, "peer.js")); err != nil {
		return m, fmt.Errorf("no Node.js peers module at %s (want peer.js there; see --node-dir)", abs)
	}
	if m.node, err = exec.LookPath("node"); err != nil {
		return m, errors.New("graphile-worker and pg-boss need Node.js 20 or later: no node on PATH")
	}
	if nodeModulesCurrent(abs) {
		return m, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return m, fmt.Errorf("%s/node_modules is missing or stale and there is no npm on PATH: run `npm ci` in %s", abs, abs)
	}
	log.Info("installing the Node.js peers' packages", zap.String("dir", abs), zap.String("command", "npm ci"))
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = abs
	out, err := cmd.CombinedOutput()
	if err != nil {
		return m, fmt.Errorf("npm ci in %s failed (%w): %s", abs, err, strings.TrimSpace(string(out)))
	}
	return m, nil
}

// nodeModulesCurrent reports whether node_modules was installed from the
// current package-lock.json: npm writes node_modules/.package-lock.json on
// every install.
func nodeModulesCurrent(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return false
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err == nil && !installed.ModTime().Before(lock.ModTime())
}

// monoNow reads CLOCK_MONOTONIC, the clock Go's monotonic readings and
// Node's process.hrtime come from.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return ts.Nano()
}

// monoClock turns CLOCK_MONOTONIC readings into time.Time values that
// carry a monotonic reading, so they subtract exactly from time.Now()
// values taken in this process. ref and refMono were read together, the
// latter as the mean of two readings around the former: they agree within
// well under a microsecond.
type monoClock struct {
	ref     time.Time
	refMono int64
}

func newMonoClock() monoClock {
	// The pairing is off by at most half the bracket around time.Now(); a
	// preemption inside it would widen that to microseconds, so the
	// tightest of a few brackets is kept.
	var best monoClock
	width := int64(-1)
	for range 32 {
		a := monoNow()
		ref := time.Now()
		b := monoNow()
		if width < 0 || b-a < width {
			width, best = b-a, monoClock{ref: ref, refMono: a + (b-a)/2}
		}
	}
	return best
}

func (c monoClock) at(mono int64) time.Time { return c.ref.Add(time.Duration(mono - c.refMono)) }

// nodePeer is graphile-worker or pg-boss in one configuration, run by
// node/peer.js.
type nodePeer struct {
	system  string
	options map[string]any // the system's options; absent ones keep its defaults
	module  nodeModule
	modErr  error // why the module cannot run here
	log     *zap.Logger

	pool    *pgxpool.Pool
	clock   monoClock
	started startFunc

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan string // protocol replies other than job lines
	exited  chan error  // the child's exit status, once
	errMu   sync.Mutex
	failure string // an "error" line from the child
}

// nodeSpec is a Node.js peer configuration. module is called when a
// scenario first needs it, so a run that selects no Node.js peer never
// looks for node.
func nodeSpec(system, mode string, workers int, options map[string]any, module func() (nodeModule, error), log *zap.Logger) spec {
	return spec{
		system:  system,
		mode:    mode,
		workers: workers,
		new: func() peer {
			m, err := module()
			return &nodePeer{system: system, options: options, log: log, module: m, modErr: err}
		},
	}
}

func (p *nodePeer) setup(ctx context.Context, pool *pgxpool.Pool, started startFunc) error {
	if p.modErr != nil {
		return p.modErr
	}
	p.pool, p.started, p.clock = pool, started, newMonoClock()
	conf, err := json.Marshal(map[string]any{"system": p.system, "dsn": pool.Config().ConnString(), "options": p.options})
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.module.node, "peer.js")
	p.cmd.Dir = p.module.dir
	p.cmd.Stderr = &logWriter{log: p.log.Named(p.system)}
	p.cmd.Env = append(os.Environ(), "NODE_ENV=production")
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	before := monoNow()
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	p.replies = make(chan string, 16)
	p.exited = make(chan error, 1)
	done := make(chan struct{})
	go func() { p.read(stdout); close(done) }()
	go func() { <-done; p.exited <- p.cmd.Wait() }()
	if _, err := io.WriteString(p.stdin, string(conf)+"\n"); err != nil {
		return p.kill(fmt.Errorf("configure node: %w", err))
	}
	reply, err := p.await(ctx, "ready")
	if err != nil {
		return p.kill(fmt.Errorf("%s setup: %w", p.system, err))
	}
	after := monoNow()
	// The child read the clock between before and after: if it did not, it
	// reads another clock than ours and no latency would mean anything.
	nodeMono, err := strconv.ParseInt(strings.TrimPrefix(reply, "ready "), 10, 64)
	if err != nil || nodeMono < before || nodeMono > after {
		return p.kill(fmt.Errorf("node's process.hrtime (%q) is not this process's CLOCK_MONOTONIC (between %d and %d)", reply, before, after))
	}
	return nil
}

// read parses the child's stdout until it closes.
func (p *nodePeer) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	untimed := int64(0)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "j "):
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			seq, err1 := strconv.ParseInt(f[1], 10, 64)
			mono, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil {
				p.started(seq, p.clock.at(mono))
			}
		case strings.HasPrefix(line, "c "):
			n, err := strconv.ParseInt(strings.TrimPrefix(line, "c "), 10, 64)
			if err != nil {
				continue
			}
			now := time.Now()
			for ; untimed < n; untimed++ {
				p.started(drainSeq, now)
			}
		case strings.HasPrefix(line, "error "):
			p.errMu.Lock()
			p.failure = strings.TrimPrefix(line, "error ")
			p.errMu.Unlock()
			p.log.Error("node peer failed", zap.String("system", p.system), zap.String("error", p.failure))
		default:
			select {
			case p.replies <- line:
			default:
				p.log.Warn("unexpected line from node", zap.String("line", line))
			}
		}
	}
}

// await waits for a reply that starts with want.
func (p *nodePeer) await(ctx context.Context, want string) (string, error) {
	t := time.NewTimer(nodeStartTimeout)
	defer t.Stop()
	for {
		select {
		case line := <-p.replies:
			if strings.HasPrefix(line, want) {
				return line, nil
			}
			p.log.Warn("unexpected reply from node", zap.String("want", want), zap.String("line", line))
		case err := <-p.exited:
			p.exited <- err // for stop
			return "", fmt.Errorf("node exited (%v) before %q: %s", err, want, p.childError())
		case <-t.C:
			return "", fmt.Errorf("no %q from node within %s", want, nodeStartTimeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (p *nodePeer) childError() string {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.failure == "" {
		return "no error line"
	}
	return p.failure
}

func (p *nodePeer) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

// kill ends the child at once, for a setup that failed.
func (p *nodePeer) kill(err error) error {
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
	return err
}

func jsonSeq(seq int64) string { return `{"seq":` + strconv.FormatInt(seq, 10) + `}` }

func (p *nodePeer) insertTx(ctx context.Context, tx pgx.Tx, seq int64) error {
	var err error
	switch p.system {
	case systemGraphile:
		_, err = tx.Exec(ctx, graphileAddJob, nodeJobName, jsonSeq(seq))
	case systemPgBoss:
		_, err = tx.Exec(ctx, pgBossInsert, nodeJobName, jsonSeq(seq))
	default:
		err = fmt.Errorf("unknown Node.js system %q", p.system)
	}
	return err
}

func (p *nodePeer) insertMany(ctx context.Context, n int) error {
	if err := p.send("insert " + strconv.Itoa(n)); err != nil {
		return err
	}
	_, err := p.await(ctx, "inserted")
	return err
}

func (p *nodePeer) start(ctx context.Context) error {
	if err := p.send("start"); err != nil {
		return err
	}
	_, err := p.await(ctx, "started")
	return err
}

// stop asks for a graceful stop and waits for the child to exit; past ctx
// it kills it.
func (p *nodePeer) stop(ctx context.Context) error {
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	if err := p.send("stop"); err != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("ask node to stop: %w", err)
	}
	_ = p.stdin.Close()
	select {
	case err := <-p.exited:
		if err != nil {
			return fmt.Errorf("node exited: %w (%s)", err, p.childError())
		}
		return nil
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop: %w", p.system, ctx.Err())
	}
}

func (p *nodePeer) pending(ctx context.Context) (int, error) {
	var n int
	var err error
	switch p.system {
	case systemGraphile:
		err = p.pool.QueryRow(ctx, graphilePending).Scan(&n)
	default:
		err = p.pool.QueryRow(ctx, pgBossPending, nodeJobName).Scan(&n)
	}
	return n, err
}

// poolSize is the Go side's pool: only the pending check uses it. The child
// opens its own.
func (p *nodePeer) poolSize() int { return 2 }

// logWriter logs each line a child writes to stderr.
type logWriter struct {
	log *zap.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.log.Warn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}
