package patroni_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/patroni"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testwait"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// start starts a cluster for t, or ends t when Patroni is not installed.
func start(t *testing.T) *patroni.Cluster {
	t.Helper()
	skipThroughPgBouncer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := patroni.Start(ctx, patroni.Options{Logger: zaptest.NewLogger(t)})
	if errors.Is(err, patroni.ErrNotInstalled) {
		testdb.Missing(t, "cannot start a Patroni cluster: %v", err)
	}
	require.NoError(t, err)
	t.Logf("cluster started (primary and synchronous standby) in %s", time.Since(began).Round(time.Millisecond))
	dir := c.Dir()
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")
		require.NoDirExists(t, dir)
	})
	return c
}

// skipThroughPgBouncer skips t in the suite's pass that routes main DSNs
// through PgBouncer: a Patroni cluster has nothing to do with it, and the
// direct pass runs these tests already.
func skipThroughPgBouncer(t *testing.T) {
	t.Helper()
	if testdb.ThroughPgBouncer() {
		t.Skip("no PgBouncer involved: this test runs in the suite's direct pass")
	}
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// count reads the rows of t1 through the multi-host DSN: it reaches
// whichever node is the primary now.
func count(t *testing.T, ctx context.Context, c *patroni.Cluster) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t1").Scan(&n))
	return n
}

func TestSwitchoverThenFailover(t *testing.T) {
	t.Parallel()
	c := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	first, err := c.Leader(ctx)
	require.NoError(t, err)
	require.Len(t, c.Names(), patroni.Nodes)
	require.Contains(t, c.DSN("db"), "target_session_attrs=read-write")
	conn := connect(t, ctx, c.DSN("postgres"))
	var walLevel string
	var inRecovery bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('wal_level'), pg_is_in_recovery()").Scan(&walLevel, &inRecovery))
	require.Equal(t, "logical", walLevel)
	require.False(t, inRecovery, "the multi-host DSN must reach the primary")
	_, err = conn.Exec(ctx, "CREATE TABLE t1 (id int)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO t1 SELECT generate_series(1, 100)")
	require.NoError(t, err)
	// The standby is read-only, as the runtime will find it after a failover.
	standby := connect(t, ctx, c.NodeDSN(otherThan(c, first.Name), "postgres"))
	_, err = standby.Exec(ctx, "INSERT INTO t1 VALUES (0)")
	require.ErrorContains(t, err, "25006")

	// Planned switchover.
	began := time.Now()
	from, to, err := c.Switchover(ctx)
	require.NoError(t, err)
	t.Logf("switchover %s → %s: new leader accepts writes after %s", from, to, time.Since(began).Round(time.Millisecond))
	require.Equal(t, first.Name, from)
	require.NotEqual(t, from, to)
	require.Equal(t, 100, count(t, ctx, c), "a synchronous switchover loses no commit")
	// The old primary's connection was closed by its clean shutdown.
	require.Error(t, conn.Ping(ctx))

	// The old primary follows the new one and becomes its synchronous
	// standby again; then the new leader's postmaster is killed.
	_, _, err = c.WaitSynced(ctx)
	require.NoError(t, err)
	insert := connect(t, ctx, c.DSN("postgres"))
	_, err = insert.Exec(ctx, "INSERT INTO t1 SELECT generate_series(101, 200)")
	require.NoError(t, err)
	began = time.Now()
	killed, pid, err := c.KillLeaderPostmaster(ctx)
	require.NoError(t, err)
	require.Equal(t, to, killed)
	leader, err := waitNewLeader(ctx, c, killed)
	require.NoError(t, err)
	t.Logf("postmaster of %s (pid %d) killed: %s accepts writes after %s", killed, pid, leader.Name, time.Since(began).Round(time.Millisecond))
	require.Equal(t, 200, count(t, ctx, c), "a failover to the synchronous standby loses no acknowledged commit")
	require.NotEqual(t, pid, c.PostmasterPID(killed), "the killed postmaster is gone")

	// And the crashed node comes back as a standby.
	began = time.Now()
	_, standbyAgain, err := c.WaitSynced(ctx)
	require.NoError(t, err)
	t.Logf("%s back as the synchronous standby after %s", killed, time.Since(began).Round(time.Millisecond))
	require.Equal(t, killed, standbyAgain.Name)
}

// waitNewLeader waits until a node other than old leads and accepts writes.
func waitNewLeader(ctx context.Context, c *patroni.Cluster, old string) (patroni.Member, error) {
	for {
		m, err := c.WaitLeader(ctx)
		if err != nil || m.Name != old {
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func otherThan(c *patroni.Cluster, name string) string {
	for _, n := range c.Names() {
		if n != name {
			return n
		}
	}
	return ""
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, patroni.Options{Settings: map[string]string{"work_mem": "8MB"}}.Validate())
	require.ErrorContains(t, patroni.Options{Settings: map[string]string{"port": "5"}}.Validate(), `Settings["port"]`)
	_, err := patroni.Start(context.Background(), patroni.Options{PatroniBin: "/nonexistent/patroni"})
	require.ErrorIs(t, err, patroni.ErrNotInstalled)
}

// childEnv makes the test binary start a cluster, print its directory and
// wait to be killed: TestDeathCleansUp kills it with SIGKILL.
const childEnv = "FILA_PATRONI_TEST_CHILD"

func runChild() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := patroni.Start(ctx, patroni.Options{})
	if err != nil {
		fmt.Println("error:", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	fmt.Println("dir:", c.Dir())
	select {} // until killed
}

// TestDeathCleansUp kills a process that started a cluster with SIGKILL,
// as a test timeout or an operator would: the cluster's processes must stop
// and its directory go, though nothing in that process could act.
func TestDeathCleansUp(t *testing.T) {
	t.Parallel()
	skipThroughPgBouncer(t)
	if _, err := os.Stat(patroni.PatroniBinDefault); err != nil {
		testdb.Missing(t, "patroni is not installed: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	started := time.Now()
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var dir string
	select {
	case line := <-lines:
		var ok bool
		dir, ok = strings.CutPrefix(line, "dir: ")
		require.True(t, ok, "the child said %q", line)
	case <-time.After(2 * time.Minute):
		t.Fatal("the child did not start its cluster within 2 minutes")
	}
	require.DirExists(t, filepath.Join(dir, "n1"))
	require.NotEmpty(t, processesNaming(dir))
	// The cleanup is judged against how long this machine took to start the
	// cluster, not a fixed time: beside four busy loops and the race
	// detector's pass, the processes were gone but removing the directory
	// took longer than 30 s.
	took := time.Since(started)
	within := 30*time.Second + 2*took

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed = true
	var removed bool
	var left []int
	if !testwait.For(within, func() bool {
		_, statErr := os.Stat(dir)
		removed, left = os.IsNotExist(statErr), processesNaming(dir)
		return removed && len(left) == 0
	}) {
		t.Fatalf("%s after the kill (the cluster took %s to start): dir removed %v, processes left %v",
			within.Round(time.Second), took.Round(time.Millisecond), removed, left)
	}
}

// processesNaming lists processes whose command line names dir (a zombie's
// is empty: it is gone).
func processesNaming(dir string) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range entries {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
