package chaos_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/chaos"
)

// The faults that must not let a job run on two workers at once: each
// checks nothing is lost and nothing overlaps, and reports the margin left
// before the lease expired.

func TestPartitionFreeze(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "partition-freeze", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Positive(t, res.Rescues)
}

func TestPartitionReset(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "partition-reset", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Positive(t, res.Rescues)
}

func TestFrozenWorker(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "frozen-worker", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Positive(t, res.Rescues)
}

func TestRowLock(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "row-lock", chaos.Size{})
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Positive(t, res.Rescues)
}

func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "lost-claim-reply", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Zero(t, res.Duplicated)
}

func TestEscapingDescendants(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "escaping-descendants", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}

func TestShutdownDBDown(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "shutdown-db-down", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}

func TestUniquePending(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "unique-pending", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}

func TestTinyTimeout(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "tiny-timeout", chaos.Size{Jobs: 3000, Workers: 2})
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}
