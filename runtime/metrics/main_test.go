package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
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

// Shared with the other packages' tests (internal/testrt).
var (
	newDB   = testrt.Migrated
	start   = testrt.Start
	waitFor = testrt.WaitFor
)

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
