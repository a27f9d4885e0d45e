package suite_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/suite"
	"github.com/fila-run/fila/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	)
}

// tiny runs scenarios at the smallest sizes that still exercise them.
func tiny(t *testing.T, scenarios ...string) *suite.Results {
	t.Helper()
	return tinyWith(t, func(*suite.Options) {}, scenarios...)
}

func tinyWith(t *testing.T, edit func(*suite.Options), scenarios ...string) *suite.Results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := suite.Options{
		DSN:              testdb.AdminURL(),
		Scenarios:        scenarios,
		Rates:            []int{50},
		Modes:            []string{suite.ModeNotify, suite.ModePoll50},
		Duration:         300 * time.Millisecond,
		DrainJobs:        500,
		Workers:          20,
		ClaimBatch:       100,
		IdleDuration:     time.Second,
		ProducerCounts:   []int{1, 3},
		ProducerDuration: 200 * time.Millisecond,
		Logger:           zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
	edit(&opts)
	res, err := suite.Run(ctx, opts)
	require.NoError(t, err)
	for _, n := range res.Notes {
		// A busy machine may delay the producers or bring autovacuum in;
		// a failed or skipped run is an error.
		require.NotRegexp(t, "failed|skipped", n)
	}
	require.NotEmpty(t, res.Machine.PostgresVersion)
	return res
}

func requireOrdered(t *testing.T, l bench.LatencyResult) {
	t.Helper()
	require.Positive(t, l.Count, "%s %s", l.System, l.Mode)
	require.Zero(t, l.Lost, "%s %s", l.System, l.Mode)
	require.Len(t, l.SamplesMs, l.Count)
	require.Positive(t, l.P50Ms)
	require.LessOrEqual(t, l.P50Ms, l.P90Ms)
	require.LessOrEqual(t, l.P90Ms, l.P99Ms)
	require.LessOrEqual(t, l.P99Ms, l.P999Ms)
	require.LessOrEqual(t, l.P999Ms, l.MaxMs)
}

func TestLatencyAndFloor(t *testing.T) {
	t.Parallel()
	res := tiny(t, suite.ScenarioLatency, suite.ScenarioFloor)
	var got []string
	for _, l := range res.Latency {
		requireOrdered(t, l)
		require.Equal(t, 50, l.RatePerSec)
		got = append(got, l.System+"/"+l.Mode)
	}
	require.Equal(t, []string{"floor/listen", "floor/notify+claim", "fila/notify", "fila/poll-50ms"}, got)

	dir := t.TempDir()
	chart := filepath.Join(dir, "latency.svg")
	require.NoError(t, suite.WriteChart(chart, res, 50))
	svg, err := os.ReadFile(chart)
	require.NoError(t, err)
	require.Contains(t, string(svg), "fila notify")
	require.Contains(t, string(svg), "floor notify+claim")

	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.Contains(t, text.String(), "Pickup latency (ms)")
	require.Contains(t, text.String(), "Fila over the floor")
}

func TestThroughput(t *testing.T) {
	t.Parallel()
	// Long enough a steady run for completions to be written within it on
	// a busy machine.
	res := tinyWith(t, func(o *suite.Options) { o.Duration = time.Second },
		suite.ScenarioDrain, suite.ScenarioSteady, suite.ScenarioSQLFloor)
	require.Len(t, res.Throughput, 3)
	modes := map[string]bench.ThroughputResult{}
	for _, r := range res.Throughput {
		require.Positive(t, r.Jobs, r.Mode)
		require.Positive(t, r.JobsPerSec, r.Mode)
		require.Positive(t, r.Seconds, r.Mode)
		modes[r.Mode] = r
	}
	require.Equal(t, 500, modes[suite.ThroughputDrain].Jobs)
	require.Equal(t, 500, modes[suite.ThroughputSQLFloor].Jobs)
	require.Contains(t, modes[suite.ThroughputSteady].Config, "producers")
}

func TestIdle(t *testing.T) {
	t.Parallel()
	res := tiny(t, suite.ScenarioIdle)
	require.Len(t, res.Idle, 2)
	for _, x := range res.Idle {
		require.Greater(t, x.Seconds, 0.5, "the measured window is about the 1 s asked for")
		require.GreaterOrEqual(t, x.Transactions, int64(0), x.Mode)
		require.Positive(t, x.Backends, x.Mode)
	}
	// A 50 ms poll claims about 20 times a second; in a second it can
	// hardly claim fewer than a few times.
	require.Equal(t, suite.ModePoll50, res.Idle[1].Mode)
	require.Greater(t, res.Idle[1].Transactions, int64(3))
}

func TestProducers(t *testing.T) {
	t.Parallel()
	res := tiny(t, suite.ScenarioProducers)
	require.Len(t, res.Producers, 4) // notify and no-trigger × 1 and 3 producers
	for _, p := range res.Producers {
		require.Positive(t, p.Commits, "%s ×%d", p.Mode, p.Producers)
		require.Positive(t, p.CommitsPerSec)
		require.LessOrEqual(t, p.P50Ms, p.P99Ms)
		require.LessOrEqual(t, p.P99Ms, p.MaxMs)
	}

	path := filepath.Join(t.TempDir(), "bench.json")
	require.NoError(t, suite.WriteJSON(path, res))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var back map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &back))
	for _, k := range []string{"machine", "latency", "throughput", "idle", "producers"} {
		require.Contains(t, back, k)
	}
	var text bytes.Buffer
	require.NoError(t, suite.WriteText(&text, res))
	require.True(t, strings.Contains(text.String(), "no-trigger commits/s"), text.String())
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []suite.Options{
		{Scenarios: []string{"nope"}},
		{Modes: []string{"push"}},
		{Rates: []int{0}},
		{Duration: time.Millisecond},
		{Workers: -1},
	} {
		require.Error(t, o.WithDefaults().Validate(), "%+v", o)
	}
	require.NoError(t, suite.Options{}.WithDefaults().Validate())
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once; with Throwaway unset, Run must say
	// so rather than start a cluster.
	_, err := suite.Run(ctx, suite.Options{DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Scenarios: []string{suite.ScenarioDrain}})
	require.ErrorContains(t, err, "cannot reach PostgreSQL")
}

func TestThrowawayCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Nothing answers on port 1: with Throwaway set, Run starts a cluster
	// of its own from the installed binaries, runs there and removes it.
	res, err := suite.Run(ctx, suite.Options{
		DSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Throwaway: true,
		Scenarios: []string{suite.ScenarioDrain}, DrainJobs: 200, Workers: 10, ClaimBatch: 50,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
	})
	require.NoError(t, err)
	require.Equal(t, "throwaway cluster", res.Server)
	require.Equal(t, "logical", res.Machine.WALLevel)
	require.Len(t, res.Throughput, 1)
	require.Equal(t, 200, res.Throughput[0].Jobs)
}
