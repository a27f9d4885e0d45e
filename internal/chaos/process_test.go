package chaos_test

import (
	"testing"

	"github.com/fila-run/fila/internal/chaos"
)

// processSize keeps the process scenarios to their smallest load.
var processSize = chaos.Size{Jobs: 6000}

func TestKillWorker(t *testing.T) {
	t.Parallel()
	run(t, env(t), "kill", processSize)
}

func TestStallWorker(t *testing.T) {
	t.Parallel()
	run(t, env(t), "stall", processSize)
}

func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	run(t, env(t), "shutdown", processSize)
}
