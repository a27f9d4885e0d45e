package listener

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/patroni"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// TestSourcesFollowThePrimary runs both wake sources on a Patroni cluster
// of the test's own. Sources pinned to the standby keep trying (a standby
// refuses LISTEN and logical decoding) instead of giving up, and listen or
// stream there once a switchover promotes it. Sources on the multi-host DSN
// (target_session_attrs=read-write) follow the primary through that
// switchover and through a failover after the new primary's postmaster is
// killed: they LISTEN again, or create a new temporary slot, on whichever
// node is the primary, without a restart.
//
// It runs in the direct pass of the suite only: listeners never go through
// PgBouncer, so the pass that routes main DSNs through it has nothing to add.
func TestSourcesFollowThePrimary(t *testing.T) {
	t.Parallel()
	if testdb.ThroughPgBouncer() {
		t.Skip("listeners are always direct: this test runs in the suite's direct pass")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logger, _ := testLogger(t)
	c, err := patroni.Start(ctx, patroni.Options{Logger: logger})
	if errors.Is(err, patroni.ErrNotInstalled) {
		testdb.Missing(t, "cannot start a Patroni cluster: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	leader, standby, err := c.WaitSynced(ctx)
	require.NoError(t, err)

	pool, err := pgxpool.New(ctx, c.DSN("postgres"))
	require.NoError(t, err)
	defer pool.Close()
	_, err = migrations.Migrate(ctx, pool)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'listener-test')`)
	require.NoError(t, err)
	insert := func() {
		t.Helper()
		// The pool's connections to a former primary are gone: retry on
		// new ones, which the DSN leads to the new primary.
		waitFor(t, 2*waitTimeout, "an insert on the primary", func() bool {
			_, err := pool.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('k')")
			return err == nil
		})
	}

	const reconnectMax = 500 * time.Millisecond
	pinned := []Source{
		newListener(t, Config{DSN: c.NodeDSN(standby.Name, "postgres"), ReconnectMax: reconnectMax}),
		newWAL(t, WALConfig{DSN: c.NodeDSN(standby.Name, "postgres"), ReconnectMax: reconnectMax}),
	}
	following := []Source{
		newListener(t, Config{DSN: c.DSN("postgres"), ReconnectMax: reconnectMax}),
		newWAL(t, WALConfig{DSN: c.DSN("postgres"), ReconnectMax: reconnectMax}),
	}
	for _, s := range append(following, pinned...) {
		start(t, s)
	}
	for _, s := range following {
		waitReady(t, s)
	}
	for _, s := range pinned {
		waitFor(t, waitTimeout, "a source on the standby to say why it waits", func() bool {
			return strings.Contains(s.(interface{ Stats() Stats }).Stats().LastError, ErrStandby.Error())
		})
		require.False(t, s.Healthy())
	}

	// Switchover: the standby is promoted.
	from, to, err := c.Switchover(ctx)
	require.NoError(t, err)
	require.Equal(t, leader.Name, from)
	require.Equal(t, standby.Name, to)
	for _, s := range append(following, pinned...) {
		waitFor(t, 2*waitTimeout, "the source to listen on the new primary", s.Healthy)
		drain(s.Wakes())
	}
	insert()
	for _, s := range append(following, pinned...) {
		waitWake(t, s, "a wake for an insert on the new primary")
	}

	// Failover: the new primary's postmaster is killed. Patroni either
	// promotes the other node or, holding the leader key still, restarts
	// the crashed one as the primary (as a loaded machine makes likelier):
	// the sources must follow whichever is the primary then.
	_, _, err = c.KillLeaderPostmaster(ctx)
	require.NoError(t, err)
	for _, s := range following {
		waitFor(t, 2*waitTimeout, "the source to notice the crash", func() bool { return !s.Healthy() })
	}
	back, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	t.Logf("primary after the failover: %s (before the crash: %s)", back.Name, to)
	for _, s := range following {
		waitFor(t, 2*waitTimeout, "the source to listen on the primary after the failover", s.Healthy)
		drain(s.Wakes())
	}
	insert()
	for _, s := range following {
		waitWake(t, s, "a wake for an insert after the failover")
	}
}
