package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// A global flag that does not exist is one line naming it, not the whole
// usage; -h and a missing command still print the usage.
func TestUnknownGlobalFlagIsOneLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run([]string{"--bogus"}, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Equal(t, "fila: flag provided but not defined: -bogus (run fila help)\n", stderr.String())

	for _, args := range [][]string{{"-h"}, {}} {
		stderr.Reset()
		run(args, &stdout, &stderr)
		require.Contains(t, stderr.String(), "usage: fila", "%q", args)
		require.Contains(t, stderr.String(), "-log-level", "%q: the global flags", args)
	}
}
