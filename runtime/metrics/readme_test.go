package metrics_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

// readmeMetric is one metric as the table of metrics of the metrics guide
// (docs/metrics-and-alerts.md) describes it.
type readmeMetric struct {
	typ    string
	labels []string
}

// readmeMetrics reads the metrics guide's table of metrics: each row names one or
// more metrics, their type (one for all, or one each, in order) and their
// labels (blank for none).
func readmeMetrics(t *testing.T) map[string]readmeMetric {
	t.Helper()
	readme, err := os.ReadFile("../../docs/metrics-and-alerts.md")
	require.NoError(t, err)
	const header = "| metric | type | labels | what |\n| --- | --- | --- | --- |\n"
	_, table, ok := strings.Cut(string(readme), header)
	require.True(t, ok, "docs/metrics-and-alerts.md has a table of metrics")
	names := regexp.MustCompile("`(fila_[a-z_]+)`")
	out := map[string]readmeMetric{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 4, "a row of four cells: %s", line)
		var rowNames []string
		for _, m := range names.FindAllStringSubmatch(cells[0], -1) {
			rowNames = append(rowNames, m[1])
		}
		require.NotEmpty(t, rowNames, line)
		types := strings.Split(strings.TrimSpace(cells[1]), ", ")
		require.True(t, len(types) == 1 || len(types) == len(rowNames), "one type, or one per metric: %s", line)
		var labels []string
		if l := strings.TrimSpace(cells[2]); l != "" {
			labels = strings.Split(l, ", ")
		}
		slices.Sort(labels)
		for i, name := range rowNames {
			typ := types[0]
			if len(types) > 1 {
				typ = types[i]
			}
			_, dup := out[name]
			require.False(t, dup, "%s is in the table twice", name)
			out[name] = readmeMetric{typ: typ, labels: labels}
		}
	}
	return out
}

// The metrics guide's table of metrics lists every metric the collector exports,
// with its type and labels, and nothing else: it is compared with a scrape
// of a collector whose every metric has a series (a table to read, a
// runtime attached in notify mode, expected queues and kinds) and with the
// collector's own descriptions.
func TestREADMEListsEveryMetric(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	m := metrics.New(metrics.Options{DB: db.Pool, StatsMaxAge: time.Millisecond, Kinds: []string{"k"},
		Logger: zaptest.NewLogger(t)})
	rt := start(t, runtime.Config{DSN: db.DSN, ListenDSN: db.DirectDSN, Observer: m, Logger: zaptest.NewLogger(t),
		Kinds: []runtime.Kind{{Name: "k", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }}}})
	m.Attach(rt)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(m))
	// A job no live worker handles: fila_unhandled_jobs has a series only
	// while there are some.
	_, err := runtime.Insert(context.Background(), db.Pool, "nobody-runs-this", nil, nil)
	require.NoError(t, err)

	// What the collector describes: every name it may export.
	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var described []string
	for d := range descs {
		match := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, match, d.String())
		described = append(described, match[1])
	}

	want := readmeMetrics(t)
	waitFor(t, 10*time.Second, "the wake source up", func() bool { return rt.Stats().Healthy })
	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]readmeMetric{}
	for _, f := range fams {
		var labels []string
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		slices.Sort(labels)
		got[f.GetName()] = readmeMetric{typ: strings.ToLower(dto.MetricType_name[int32(f.GetType())]), labels: labels}
	}
	for _, name := range described {
		require.Contains(t, got, name, "described but not exported by this scrape: the test must give it a series")
	}
	require.Equal(t, want, got, "the table of metrics of docs/metrics-and-alerts.md (type, labels) and what the collector exports")
}
