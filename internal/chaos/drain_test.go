package chaos_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/chaos"
)

// drainSize keeps each drain to a few seconds on a small shared machine.
var drainSize = chaos.Size{Jobs: 2000, Workers: 6}

func TestLockWaits(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "lock-waits", drainSize)
	require.Zero(t, res.Lost)
}

func TestRestartPostgresFast(t *testing.T) {
	t.Parallel()
	res := run(t, clusterEnv(t, false), "pg-restart-fast", drainSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Duplicated)
	require.Zero(t, res.Overlapping)
}

func TestRestartPostgresImmediate(t *testing.T) {
	t.Parallel()
	res := run(t, clusterEnv(t, false), "pg-restart-immediate", drainSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Duplicated)
	require.Zero(t, res.Overlapping)
}

func TestRestartPgBouncer(t *testing.T) {
	t.Parallel()
	res := run(t, clusterEnv(t, true), "pgbouncer-restart", drainSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Duplicated)
	require.Zero(t, res.Overlapping)
}

func TestTerminateListener(t *testing.T) {
	t.Parallel()
	run(t, env(t), "listener-terminate", chaos.Size{})
}

func TestHalfOpenListener(t *testing.T) {
	t.Parallel()
	run(t, env(t), "listener-halfopen", chaos.Size{})
}

func TestPoolExhaustion(t *testing.T) {
	t.Parallel()
	run(t, env(t), "pool-exhaustion", chaos.Size{})
}

func TestPoison(t *testing.T) {
	t.Parallel()
	run(t, env(t), "poison", chaos.Size{})
}

func TestNotifyPressure(t *testing.T) {
	t.Parallel()
	run(t, clusterEnv(t, false), "notify-pressure", chaos.Size{})
}
