package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench/suite"
	"github.com/fila-run/fila/internal/testdb"
)

func TestBenchFlags(t *testing.T) {
	t.Parallel()
	f := benchFlags{scenarios: "latency, drain", rates: "10,100", modes: "notify", producers: "1,4"}
	o, err := f.options()
	require.NoError(t, err)
	require.Equal(t, []string{"latency", "drain"}, o.Scenarios)
	require.Equal(t, []int{10, 100}, o.Rates)
	require.Equal(t, []int{1, 4}, o.ProducerCounts)

	for _, bad := range []benchFlags{
		{scenarios: "latency,nope"},
		{scenarios: "drain", rates: "10,x"},
		{scenarios: "drain", modes: "push"},
		{scenarios: ""},
	} {
		_, err := bad.options()
		require.Error(t, err, "%+v", bad)
	}
}

func TestBenchCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	cmd := exec.Command(filaBin, "bench", "--dsn", testdb.AdminURL(),
		"--scenarios", "drain,sqlfloor", "--drain-jobs", "300", "--workers", "20", "--claim-batch", "100",
		"--json", jsonPath, "--chart", filepath.Join(dir, "latency.svg"))
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "machine: ")
	require.Contains(t, string(out), "Throughput (no-op jobs)")

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var res suite.Results
	require.NoError(t, json.Unmarshal(b, &res))
	require.Len(t, res.Throughput, 2)
	for _, r := range res.Throughput {
		require.Equal(t, 300, r.Jobs)
		require.Positive(t, r.JobsPerSec)
	}
	// No latency scenario ran: no chart.
	require.NoFileExists(t, filepath.Join(dir, "latency.svg"))
}

func TestBenchBadFlag(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filaBin, "bench", "--scenarios", "nope")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.ExitCode())
	require.Contains(t, string(out), `scenario "nope" is unknown`)
}
