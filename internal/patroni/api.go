package patroni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Roles of a Member, as Patroni's REST API names them.
const (
	RoleLeader      = "leader"
	RoleSyncStandby = "sync_standby"
	RoleReplica     = "replica"
)

// ErrNoLeader is returned by Leader while no node leads with a running
// PostgreSQL.
var ErrNoLeader = errors.New("patroni: no running leader")

// pollEvery is how often the Wait methods look again.
const pollEvery = 20 * time.Millisecond

// Member is one node as Patroni's REST API (GET /cluster) reports it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	State    string `json:"state"` // running, streaming, starting, stopped, crashed, …
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
	// Lag is how far behind the leader it is, in bytes, or "unknown".
	Lag any `json:"lag,omitempty"`
}

func (m Member) running() bool { return m.State == "running" || m.State == "streaming" }

// Members returns the nodes as the first Patroni that answers reports them.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	var errs []error
	for _, n := range c.nodes {
		var out struct {
			Members []Member `json:"members"`
		}
		err := c.get(ctx, n, "/cluster", &out)
		if err == nil {
			return out.Members, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
	}
	return nil, fmt.Errorf("patroni: no REST API answered: %w", errors.Join(errs...))
}

// Leader returns the node that holds the leader key with its PostgreSQL
// running, or ErrNoLeader. Its PostgreSQL may still be finishing its
// promotion: WaitLeader waits until it accepts writes.
func (c *Cluster) Leader(ctx context.Context) (Member, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return Member{}, err
	}
	for _, m := range ms {
		if m.Role == RoleLeader && m.running() {
			return m, nil
		}
	}
	return Member{}, ErrNoLeader
}

// WaitLeader waits until a leader's PostgreSQL accepts writes, and returns
// that leader.
func (c *Cluster) WaitLeader(ctx context.Context) (Member, error) {
	var last error
	for {
		if err := c.exited(); err != nil {
			return Member{}, err
		}
		m, err := c.Leader(ctx)
		if err == nil {
			if err = c.writable(ctx, m.Name); err == nil {
				return m, nil
			}
		}
		last = err
		if !sleep(ctx, pollEvery) {
			return Member{}, fmt.Errorf("patroni: no leader accepting writes: %w (last: %v)", ctx.Err(), last)
		}
	}
}

// WaitSynced waits until a leader accepts writes and another node streams
// from it as its synchronous standby, so that every commit from now on is
// on both nodes before it is acknowledged: a switchover or a failover may
// then lose nothing acknowledged. It returns the leader and the standby.
func (c *Cluster) WaitSynced(ctx context.Context) (leader, standby Member, err error) {
	var last error
	for {
		if leader, err = c.WaitLeader(ctx); err != nil {
			return Member{}, Member{}, err
		}
		standby, err = c.syncStandby(ctx, leader)
		if err == nil {
			return leader, standby, nil
		}
		last = err
		if !sleep(ctx, pollEvery) {
			return Member{}, Member{}, fmt.Errorf("patroni: no synchronous standby: %w (last: %v)", ctx.Err(), last)
		}
	}
}

// WaitReplayed waits for a synchronous standby (as WaitSynced) and then
// until it has replayed everything the primary had written when it was
// called. synchronous_commit waits for a commit to be flushed on the
// standby, not replayed: a database created a moment ago may not exist
// there yet, and a client of the multi-host DSN that tries that node first
// gives up on "database does not exist" (SQLSTATE 3D000) instead of trying
// the next one.
func (c *Cluster) WaitReplayed(ctx context.Context) error {
	leader, standby, err := c.WaitSynced(ctx)
	if err != nil {
		return err
	}
	lsn, err := c.query(ctx, leader.Name, "SELECT pg_current_wal_lsn()")
	if err != nil {
		return err
	}
	var last error
	for {
		var res string
		if res, err = c.query(ctx, standby.Name, fmt.Sprintf("SELECT pg_last_wal_replay_lsn() >= '%s'::pg_lsn", lsn)); err == nil && res == "t" {
			return nil
		}
		last = err
		if !sleep(ctx, pollEvery) {
			return fmt.Errorf("patroni: %s has not replayed up to %s: %w (last: %v)", standby.Name, lsn, ctx.Err(), last)
		}
	}
}

// syncStandby returns the member Patroni names synchronous standby, once the
// leader's pg_stat_replication confirms it streams as one.
func (c *Cluster) syncStandby(ctx context.Context, leader Member) (Member, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return Member{}, err
	}
	for _, m := range ms {
		if m.Name == leader.Name || m.Role != RoleSyncStandby || !m.running() {
			continue
		}
		res, err := c.query(ctx, leader.Name, fmt.Sprintf(
			`SELECT count(*) FROM pg_stat_replication WHERE application_name = '%s' AND state = 'streaming' AND sync_state = 'sync'`, m.Name))
		if err != nil {
			return Member{}, err
		}
		if res != "1" {
			return Member{}, fmt.Errorf("%s is not streaming synchronously from %s yet", m.Name, leader.Name)
		}
		return m, nil
	}
	return Member{}, fmt.Errorf("no member is the synchronous standby of %s (members: %+v)", leader.Name, ms)
}

// Switchover hands the leadership from the leader to its synchronous
// standby, as an operator's planned switchover does (Patroni's POST
// /switchover): the old primary shuts down cleanly after its standby has
// received everything, the standby is promoted, and the old primary
// follows it. It waits for a synchronous standby first, and returns once the
// new leader accepts writes.
func (c *Cluster) Switchover(ctx context.Context) (from, to string, err error) {
	leader, standby, err := c.WaitSynced(ctx)
	if err != nil {
		return "", "", err
	}
	body, _ := json.Marshal(map[string]string{"leader": leader.Name, "candidate": standby.Name})
	n := c.node(leader.Name)
	post := func() error {
		// Patroni answers once the switchover is over (it polls for up to 20 s).
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, n.apiURL()+"/switchover", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		client := &http.Client{} // no per-request timeout: rctx bounds it
		defer client.CloseIdleConnections()
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("patroni: switchover %s → %s: %w", leader.Name, standby.Name, err)
			}
			// No answer in time, or the connection broke: the request may
			// have started the switchover all the same (a loaded machine
			// makes Patroni's API slow). The cluster says what happened.
			return fmt.Errorf("%w: %v", errSwitchoverUnknown, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(msg), "status unknown"):
			// Patroni stopped watching before the switchover ended (a
			// loaded machine makes it slow): it may still complete, or the
			// old leader may take over again. The cluster says which.
			return errSwitchoverUnknown
		default:
			return fmt.Errorf("patroni: switchover %s → %s: %s: %s", leader.Name, standby.Name, resp.Status, strings.TrimSpace(string(msg)))
		}
	}
	err = post()
	retried := false
	if err != nil && !errors.Is(err, errSwitchoverUnknown) {
		return "", "", err
	}
	answered := time.Now()
	for {
		m, err := c.WaitLeader(ctx)
		if err != nil {
			return "", "", err
		}
		if m.Name == standby.Name {
			return leader.Name, standby.Name, nil
		}
		if m.Name == leader.Name && !retried && time.Since(answered) > 30*time.Second {
			// An unknown outcome that left the old leader in charge for
			// 30 s: ask once more, once it and its standby are in sync.
			if _, _, err := c.WaitSynced(ctx); err != nil {
				return "", "", err
			}
			retried = true
			if err := post(); err != nil && !errors.Is(err, errSwitchoverUnknown) {
				return "", "", err
			}
			answered = time.Now()
			continue
		}
		if !sleep(ctx, pollEvery) {
			return "", "", fmt.Errorf("patroni: switchover %s → %s: %w", leader.Name, standby.Name, ctx.Err())
		}
	}
}

// errSwitchoverUnknown is Patroni answering 503 "Switchover status unknown":
// it gave up watching a switchover whose end it did not see.
var errSwitchoverUnknown = errors.New("patroni: switchover status unknown")

// KillLeaderPostmaster kills the leader's postmaster with SIGKILL, as a crash
// of PostgreSQL on the primary would: its backends exit as soon as they
// notice, and Patroni, which keeps running, fails over to the synchronous
// standby (primary_start_timeout 0) instead of restarting it in place. It
// waits for a synchronous standby first, and returns the node and the pid
// killed, without waiting for the failover (WaitLeader does).
func (c *Cluster) KillLeaderPostmaster(ctx context.Context) (name string, pid int, err error) {
	leader, _, err := c.WaitSynced(ctx)
	if err != nil {
		return "", 0, err
	}
	pid = c.PostmasterPID(leader.Name)
	if pid == 0 {
		return "", 0, fmt.Errorf("patroni: no running postmaster found for leader %s", leader.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", 0, fmt.Errorf("patroni: kill the postmaster of %s (pid %d): %w", leader.Name, pid, err)
	}
	return leader.Name, pid, nil
}

// PostmasterPID returns the pid of the named node's running postmaster, or 0.
// It reads postmaster.pid and checks that the process it names is a
// postmaster of that data directory, since a stale file may name a pid
// reused by now.
func (c *Cluster) PostmasterPID(name string) int {
	n := c.node(name)
	if n == nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(n.data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "-D\x00"+n.data) {
		return 0
	}
	return pid
}

// IsPrimary reports whether the named node's PostgreSQL answers and is out
// of recovery (it may not accept writes yet if Patroni has not finished).
func (c *Cluster) IsPrimary(ctx context.Context, name string) (bool, error) {
	res, err := c.query(ctx, name, "SELECT pg_is_in_recovery()")
	if err != nil {
		return false, err
	}
	return res == "f", nil
}

// writable checks that the named node accepts writes: out of recovery, and
// not read-only by default.
func (c *Cluster) writable(ctx context.Context, name string) error {
	res, err := c.query(ctx, name, "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool")
	if err != nil {
		return err
	}
	if res != "f" {
		return fmt.Errorf("%s is read-only", name)
	}
	return nil
}

// query runs one statement on the named node and returns the first column
// of its first row as text.
func (c *Cluster) query(ctx context.Context, name, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.NodeDSN(name, "postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", err
	}
	if len(res) != 1 || len(res[0].Rows) == 0 {
		return "", fmt.Errorf("%s: %q returned no row", name, sql)
	}
	return string(res[0].Rows[0][0]), nil
}

func (c *Cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (n *node) apiURL() string { return "http://127.0.0.1:" + strconv.Itoa(n.apiPort) }

// get reads a JSON document from node n's REST API.
func (c *Cluster) get(ctx context.Context, n *node, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.apiURL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// sleep waits d, or returns false as soon as ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
