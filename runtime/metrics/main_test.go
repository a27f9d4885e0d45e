package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			// pgxpool's background health check of the shared admin pool in testdb.
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func newDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := migrations.Migrate(context.Background(), db.Pool)
	require.NoError(t, err)
	return db
}

// start runs a runtime until the test ends, stopping it gracefully.
func start(t *testing.T, cfg runtime.Config) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(cfg)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
		require.NoError(t, <-errc)
	})
	select {
	case <-rt.Ready():
	case err := <-errc:
		t.Fatalf("runtime stopped before ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("runtime not ready after 60s")
	}
	return rt
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// families is one scrape, parsed by the Prometheus client library.
type families map[string]*dto.MetricFamily

// scrape gets url and parses the text exposition.
func scrape(t *testing.T, url string) families {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, string(body))
	return fams
}

// metric returns the sample of name whose labels include want, or nil.
func (f families) metric(name string, want ...string) *dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
	for _, m := range fam.GetMetric() {
		if hasLabels(m, want) {
			return m
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// value is a counter's or gauge's value; it fails the test if the sample is
// missing.
func (f families) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m := f.metric(name, labels...)
	require.NotNil(t, m, "no sample %s%v", name, labels)
	switch f[name].GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s is a %s", name, f[name].GetType())
	return 0
}

// histogram is a histogram's sample; it fails the test if it is missing.
func (f families) histogram(t *testing.T, name string, labels ...string) *dto.Histogram {
	t.Helper()
	m := f.metric(name, labels...)
	require.NotNil(t, m, "no sample %s%v", name, labels)
	require.Equal(t, dto.MetricType_HISTOGRAM, f[name].GetType())
	return m.GetHistogram()
}
