package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench/suite"
	"github.com/fila-run/fila/internal/testdb"
)

func TestBenchFlags(t *testing.T) {
	t.Parallel()
	f := benchFlags{scenarios: "latency, drain,soak", rates: "10,100", modes: "notify", producers: "1,4",
		soakDuration: 10 * time.Minute, soakRate: 5000, soakWindow: 30 * time.Second, bigCompleted: 10, bulkJobs: 7,
		peers: true, peersDir: "elsewhere/peers", minSamples: 300}
	o, err := f.options()
	require.NoError(t, err)
	require.Equal(t, 300, o.MinSamples)
	require.Equal(t, []string{"latency", "drain", "soak"}, o.Scenarios)
	require.Equal(t, []int{10, 100}, o.Rates)
	require.Equal(t, []int{1, 4}, o.ProducerCounts)
	require.Equal(t, 10*time.Minute, o.SoakDuration)
	require.Equal(t, 5000, o.SoakRate)
	require.Equal(t, 30*time.Second, o.SoakWindow)
	require.Equal(t, 10, o.BigTableCompleted)
	require.Equal(t, 7, o.BulkJobs)
	require.Equal(t, "elsewhere/peers", o.PeersDir)

	f.peers = false
	o, err = f.options()
	require.NoError(t, err)
	require.Empty(t, o.PeersDir, "no peers unless asked for")

	for _, bad := range []benchFlags{
		{scenarios: "latency,nope"},
		{scenarios: "drain", rates: "10,x"},
		{scenarios: "drain", modes: "push"},
		{scenarios: ""},
		{scenarios: "soak", soakDuration: time.Second, soakWindow: time.Minute},
		{scenarios: "soak", soakRate: -5},
		{scenarios: "drain", peers: true},
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
		"--json", jsonPath, "--chart", filepath.Join(dir, "latency.svg"),
		"--cpuprofile", filepath.Join(dir, "cpu.pprof"), "--memprofile", filepath.Join(dir, "allocs.pprof"))
	cmd.Env = append(os.Environ(), "PGSSLMODE=")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "machine: ")
	require.Contains(t, string(out), ", TLS off\n", "a DSN naming no sslmode runs without TLS, and the machine line says so")
	require.Contains(t, string(out), "Throughput (no-op jobs)")
	for _, profile := range []string{"cpu.pprof", "allocs.pprof"} {
		b, err := os.ReadFile(filepath.Join(dir, profile))
		require.NoError(t, err)
		require.Greater(t, len(b), 2, profile)
		require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "%s: a profile is gzipped protobuf", profile)
	}

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var res suite.Results
	require.NoError(t, json.Unmarshal(b, &res))
	require.Len(t, res.Throughput, 3, "drain, drain with a typed handler, SQL floor")
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

	// Zero is refused, not taken for the default.
	for _, args := range [][]string{
		{"--bigtable-scheduled", "0"},
		{"--drain-jobs", "-3"},
		{"--soak-duration", "0s"},
	} {
		cmd := exec.Command(filaBin, append([]string{"bench", "--scenarios", "bigtable"}, args...)...)
		out, err := cmd.CombinedOutput()
		require.ErrorAs(t, err, &ee, "%v", args)
		require.Equal(t, exitUsage, ee.ExitCode(), "%v", args)
		require.Contains(t, string(out), "fila bench: "+args[0]+" "+args[1]+": give ", "%v", args)
	}
}

// TestBenchPeers runs River, graphile-worker and pg-boss from the
// bench/peers module in the same run as Fila's drain, and checks that the
// goal comparing them is judged on the best peer's row rather than reported
// as not measured.
func TestBenchPeers(t *testing.T) {
	t.Parallel()
	peersDir, err := filepath.Abs(filepath.Join("..", "..", "bench", "peers"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(peersDir, "go.mod")); err != nil {
		testdb.Missing(t, "the bench/peers module: %v", err)
	}
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	cmd := exec.Command(filaBin, "bench", "--dsn", testdb.AdminURL(),
		"--scenarios", "drain,sqlfloor", "--drain-jobs", "300", "--workers", "20", "--claim-batch", "100",
		"--peers", "--peers-dir", peersDir, "--json", jsonPath, "--chart", "")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	text := string(out)
	require.Contains(t, text, "peers: river, graphile-worker, pg-boss, run by bench/peers")
	require.Regexp(t, regexp.MustCompile(`drain ≥ 2\.0× the best peer's best tuned drain: (met|MISSED) \(\d+/s vs (river|graphile-worker|pg-boss) tuned-\S+ \d+/s`), text)

	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var res suite.Results
	require.NoError(t, json.Unmarshal(b, &res))
	peers := map[string]int{}
	for _, r := range res.Throughput {
		if r.System != "fila" {
			peers[r.System]++
			require.Equal(t, 300, r.Jobs, r.Mode)
			require.Positive(t, r.JobsPerSec, r.Mode)
		}
	}
	// Each peer's default drain and its best tuned one; pg-boss's default
	// (one job every 2 s) is not run.
	require.Equal(t, map[string]int{"river": 2, "graphile-worker": 2, "pg-boss": 1}, peers)
}
