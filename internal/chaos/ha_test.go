package chaos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/chaos"
	"github.com/fila-run/fila/internal/patroni"
	"github.com/fila-run/fila/internal/testdb"
)

// TestHA runs the switchover and the failover scenarios, one after the
// other, on one Patroni cluster of the test's own, at the smallest size (a
// few seconds of flow per mode).
//
// scripts/test.sh runs it in a pass of its own, direct to PostgreSQL, before
// the others: Patroni's timing (loop_wait 1 s, a switchover watched for
// 20 s) is real time, and a machine saturated by the rest of the suite
// starved its processes into a switchover that neither completed nor failed
// in time. The cluster has no PgBouncer in front (one in front of an HA
// cluster must follow the primary by means of its own), so the pass that
// routes main DSNs through PgBouncer has nothing to add to it.
func TestHA(t *testing.T) {
	if testdb.ThroughPgBouncer() {
		t.Skip("no PgBouncer in front of the Patroni cluster: this test runs in the suite's direct pass")
	}
	e := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := patroni.Start(ctx, patroni.Options{Logger: e.Logger})
	if errors.Is(err, patroni.ErrNotInstalled) {
		testdb.Missing(t, "cannot start a Patroni cluster: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's logs:\n%s", c.LogTail())
		}
		require.NoError(t, c.Close())
	})
	e.Patroni = c
	for _, name := range []string{"ha-switchover", "ha-failover"} {
		require.True(t, chaos.NeedsPatroni(name))
		res := run(t, e, name, chaos.Size{Jobs: 1500, Workers: 3})
		require.Zero(t, res.Lost)
		require.Zero(t, res.Duplicated)
		require.Zero(t, res.Overlapping)
		require.Positive(t, res.Recovery)
	}
}
