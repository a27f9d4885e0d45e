package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChaosRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"--scenarios nope": `no scenario "nope"`,
		"--jobs 5":         "--jobs 5: want at least 100",
		"--workers 0":      "--workers 0",
	} {
		var out, errOut bytes.Buffer
		cmd := exec.Command(filaBin, append([]string{"chaos"}, strings.Fields(args)...)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		require.Error(t, err, args)
		require.Empty(t, out.String())
		line := strings.TrimSpace(errOut.String())
		require.NotContains(t, line, "\n", "%s: not one line: %s", args, line)
		require.Contains(t, line, want, args)
	}
}

// fila chaos starts a PostgreSQL and a PgBouncer of its own, runs the
// scenarios asked for and prints the table.
func TestChaosRunsScenarios(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a PostgreSQL and a PgBouncer of its own; skipped with -short")
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(filaBin, "chaos", "--scenarios", "poison,listener-terminate", "--jobs", "1000", "--markdown")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	table := out.String()
	require.Contains(t, table, "| fault | load | lost | duplicated | overlapping | worst overlap | margin | recovery | result |")
	require.Contains(t, table, "| poison input |")
	require.Contains(t, table, "| listener backend terminated |")
	require.Equal(t, 2, strings.Count(table, " | ok |"), table)
	require.Contains(t, errOut.String(), "[2/2 listener-terminate] ok")
}
