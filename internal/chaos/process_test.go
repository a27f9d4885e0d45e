package chaos_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/chaos"
)

// processSize keeps the process scenarios to their smallest load.
var processSize = chaos.Size{Jobs: 6000}

func TestKillWorker(t *testing.T) {
	t.Parallel()
	run(t, env(t), "kill", processSize)
}

func TestKillGuard(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "kill-guard", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}

func TestStallWorker(t *testing.T) {
	t.Parallel()
	run(t, env(t), "stall", processSize)
}

func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	run(t, env(t), "shutdown", processSize)
}

func TestDeafHandler(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "deaf-handler", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
}

func TestMixedKinds(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "mixed-kinds", processSize)
	require.Zero(t, res.Lost)
	require.Zero(t, res.Overlapping)
	require.Zero(t, res.Duplicated)
}

func TestScheduledOnTime(t *testing.T) {
	t.Parallel()
	res := run(t, env(t), "scheduled", processSize)
	require.Zero(t, res.Lost)
}
