package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// TestWorkFlagsAreCheckedThroughRun: the flags of issue 8 and 10, refused
// through the command's own entry with one line naming the flag, before
// anything connects or listens.
func TestWorkFlagsAreCheckedThroughRun(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	busy := taken.Addr().String()
	nowhere := "postgres://postgres@127.0.0.1:1/nowhere"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"work", "--queue", "mail=0"}, "--queue mail=0: 0 is out of range: allowed 1 to 10000"},
		{[]string{"work", "--queue", "mail=10001"}, "--queue mail=10001: 10001 is out of range"},
		{[]string{"work", "--queue", "mail=five"}, "--queue mail=five: want QUEUE or QUEUE=N"},
		{[]string{"work", "--queue", "mail="}, "--queue mail=: want QUEUE or QUEUE=N"},
		{[]string{"work", "--queue", "=5"}, "--queue =5: queue name is empty"},
		{[]string{"work", "--queue", "mail=2", "--queue", "mail=3"}, "--queue mail=3: queue mail is listed twice"},
		{[]string{"work", "--queue", "mail", "--queue", "mail=3"}, "--queue mail=3: queue mail is listed twice"},
		{[]string{"work", "--max-concurrency", "-1"}, "--max-concurrency: -1 is negative: allowed 0 (no cap) to 10000"},
		{[]string{"work", "--queue", "a", "--queue", "b", "--max-concurrency", "20001"}, "--max-concurrency: 20001 is out of range: allowed 0 (no cap) to 20000"},
		{[]string{"work", "--metrics-addr", "9090"}, `--metrics-addr: "9090": want HOST:PORT`},
		{[]string{"work", "--health-addr", "127.0.0.1"}, `--health-addr: "127.0.0.1": want HOST:PORT`},
		{[]string{"work", "--metrics-addr", busy}, "--metrics-addr " + busy + ": cannot listen"},
		{[]string{"work", "--health-addr", busy}, "--health-addr " + busy + ": cannot listen"},
		{[]string{"work", "--metrics-addr", busy, "--health-addr", busy}, "--metrics-addr and --health-addr " + busy + ": cannot listen"},
		{[]string{"work", "--metrics-addr", "127.0.0.1:0", "--health-addr", busy}, "--health-addr " + busy + ": cannot listen"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"--dsn", nowhere, "--log-level", "error"}, c.args...), &stdout, &stderr)
		require.Equal(t, 1, code, "%q should fail: %s", c.args, stderr.String())
		require.Empty(t, stdout.String())
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%q: one line: %s", c.args, stderr.String())
		require.Contains(t, stderr.String(), "fila work: "+c.want, "%q", c.args)
	}

	// Good values pass the checks: the worker goes on to connect, and says
	// it cannot.
	var stdout, stderr bytes.Buffer
	code := run([]string{"--dsn", nowhere, "--log-level", "error", "work", "--queue", "mail=5", "--queue", "reports",
		"--max-concurrency", "6", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "fila work: cannot reach the database")

	var help bytes.Buffer
	require.Zero(t, run([]string{"help", "work"}, &help, io.Discard))
	for _, want := range []string{"QUEUE=N", "-max-concurrency", "-metrics-addr", "-health-addr", "/readyz"} {
		require.Contains(t, help.String(), want)
	}
}

// TestWorkServesMetricsAndHealth: a worker started with --metrics-addr and
// --health-addr answers both, with metrics of the jobs it ran, and stops
// serving when it stops.
func TestWorkServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	w := startWorkerOutput(t, db, "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.2:0",
		"--exec", "fails=exit 3", "--exec", "perm=exit 65")
	metricsAddr := servingAddr(t, w, "/metrics")
	healthAddr := servingAddr(t, w, "/readyz")
	require.NotEqual(t, metricsAddr, healthAddr)

	require.Equal(t, "ok\n", get(t, "http://"+healthAddr+"/livez", http.StatusOK))
	waitFor(t, 60*time.Second, "/readyz says ready", func() bool {
		code, _ := getCode(t, "http://"+healthAddr+"/readyz")
		return code == http.StatusOK
	})
	code, _ := getCode(t, "http://"+metricsAddr+"/readyz")
	require.Equal(t, http.StatusNotFound, code, "health is on its own address")

	for _, args := range [][]string{
		{"enqueue", "--kind", "noop"}, {"enqueue", "--kind", "noop"},
		{"enqueue", "--kind", "fails", "--max-attempts", "1"}, {"enqueue", "--kind", "perm"},
	} {
		_, errOut, code := fila(t, db, args...)
		require.Zero(t, code, errOut)
	}
	var f map[string]*dto.MetricFamily
	waitFor(t, 30*time.Second, "the outcomes in the metrics and the table", func() bool {
		f = parseMetrics(t, get(t, "http://"+metricsAddr+"/metrics", http.StatusOK))
		return sample(f, "fila_job_outcomes_total", "kind", "noop", "outcome", "completed") == 2 &&
			sample(f, "fila_job_outcomes_total", "kind", "fails", "outcome", "dead") == 1 &&
			sample(f, "fila_job_outcomes_total", "kind", "perm", "outcome", "dead") == 1 &&
			sample(f, "fila_dead_jobs", "kind", "fails") == 1 &&
			// The table's gauges come from a snapshot cached a few seconds.
			sample(f, "fila_dead_jobs", "kind", "perm") == 1 &&
			sample(f, "fila_completed_jobs") == 2
	})
	require.EqualValues(t, 4, metric(f, "fila_pickup_latency_seconds", "queue", "default").GetHistogram().GetSampleCount())
	require.EqualValues(t, 2, metric(f, "fila_job_run_duration_seconds", "kind", "noop").GetHistogram().GetSampleCount())
	require.Equal(t, 0.0, sample(f, "fila_job_outcomes_total", "kind", "sleep", "outcome", "completed"), "every kind's series from the start")
	require.Equal(t, 1.0, sample(f, "fila_wake_source_up", "mode", "notify"))
	require.Equal(t, 2.0, sample(f, "fila_completed_jobs"))
	require.Equal(t, 1.0, sample(f, "fila_dead_jobs", "kind", "perm"))
	require.Equal(t, 0.0, sample(f, "fila_jobs", "queue", "default", "state", "pending"))
	require.Equal(t, 1.0, sample(f, "fila_stats_up"))
	require.NotNil(t, f["process_resident_memory_bytes"], "the process's own metrics")
	require.NotNil(t, f["go_goroutines"])

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.cmd.Wait())
	for _, addr := range []string{metricsAddr, healthAddr} {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		require.Error(t, err, "%s still listening after the worker stopped", addr)
	}
}

// TestReadyzSaysWhyTheWakeSourceIsDown: with the listen DSN on a port
// nothing listens on, the worker runs (polling) and is alive, but not
// ready, and says why; on one address for metrics and health.
func TestReadyzSaysWhyTheWakeSourceIsDown(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	cmd := filaCmd(db, "work", "--log-format", "json", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0")
	cmd.Env = append(cmd.Env, "FILA_LISTEN_DSN=postgres://postgres@127.0.0.1:1/"+db.Name+"?connect_timeout=2")
	w := &worker{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("worker stderr:\n%s", w.stderr.String())
		}
	})
	addr := servingAddr(t, w, "/readyz")
	require.Equal(t, addr, servingAddr(t, w, "/metrics"), "one server for both")

	require.Equal(t, "ok\n", get(t, "http://"+addr+"/livez", http.StatusOK))
	var body string
	waitFor(t, 60*time.Second, "/readyz names the wake source", func() bool {
		var code int
		code, body = getCode(t, "http://"+addr+"/readyz")
		require.NotEqual(t, http.StatusOK, code, "ready without a wake source")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "wake source is down")
	})
	require.Contains(t, body, "the notify wake source is down")
	require.Equal(t, 1, strings.Count(body, "\n"), body)
	f := parseMetrics(t, get(t, "http://"+addr+"/metrics", http.StatusOK))
	require.Equal(t, 0.0, sample(f, "fila_wake_source_up", "mode", "notify"))

	// Jobs still run, found by the fast poll.
	_, errOut, code := fila(t, db, "enqueue", "--kind", "noop")
	require.Zero(t, code, errOut)
	waitFor(t, 30*time.Second, "the job completed by polling", func() bool {
		f = parseMetrics(t, get(t, "http://"+addr+"/metrics", http.StatusOK))
		return sample(f, "fila_job_outcomes_total", "kind", "noop", "outcome", "completed") == 1
	})
	require.Zero(t, sample(f, "fila_wakeups_total", "queue", "default", "reason", "notify"))
}

// TestQueueConcurrencyFlags: --queue Q=N gives Q its own concurrency, and
// --max-concurrency caps them all, in a running worker.
func TestQueueConcurrencyFlags(t *testing.T) {
	t.Parallel()
	payload := `{"ms": 60000}` // longer than the test: the worker is killed at its end
	for _, c := range []struct {
		name  string
		args  []string
		limit map[string]int // most running at once per queue; "" for all queues
	}{
		{"own concurrency", []string{"--queue", "mail=1", "--queue", "reports", "--concurrency", "3"},
			map[string]int{"mail": 1, "reports": 3}},
		{"shared cap", []string{"--queue", "a=4", "--queue", "b=4", "--max-concurrency", "3"},
			map[string]int{"": 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := migrated(t)
			var queues []string
			for i := 0; i+1 < len(c.args); i++ {
				if c.args[i] == "--queue" {
					queues = append(queues, strings.SplitN(c.args[i+1], "=", 2)[0])
				}
			}
			startWorker(t, db, c.args...)
			for _, q := range queues {
				for range 5 {
					_, errOut, code := fila(t, db, "enqueue", "--kind", "sleep", "--queue", q, "--payload", payload)
					require.Zero(t, code, errOut)
				}
			}
			running := func() map[string]int {
				rows, err := db.Pool.Query(context.Background(),
					"SELECT queue, count(*) FROM fila_jobs WHERE state = 'running' GROUP BY queue")
				require.NoError(t, err)
				defer rows.Close()
				n := map[string]int{}
				for rows.Next() {
					var q string
					var k int
					require.NoError(t, rows.Scan(&q, &k))
					n[q] += k
					n[""] += k
				}
				require.NoError(t, rows.Err())
				return n
			}
			waitFor(t, 60*time.Second, "every queue at its limit", func() bool {
				n := running()
				for q, limit := range c.limit {
					if n[q] != limit {
						return false
					}
				}
				return true
			})
			// The limits hold while the jobs run: nothing more is claimed.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				n := running()
				for q, limit := range c.limit {
					require.LessOrEqual(t, n[q], limit, "queue %q", q)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// servingAddr reads from the worker's log the address it serves path on.
func servingAddr(t *testing.T, w *worker, path string) string {
	t.Helper()
	var addr string
	waitFor(t, 30*time.Second, "the worker logs where it serves "+path, func() bool {
		sc := bufio.NewScanner(strings.NewReader(w.stderr.String()))
		for sc.Scan() {
			var line struct {
				Logger, Msg string
				Addr        string
				Paths       []string
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Logger == "http" && line.Msg == "serving" {
				for _, p := range line.Paths {
					if p == path {
						addr = line.Addr
						return true
					}
				}
			}
		}
		return false
	})
	return addr
}

func getCode(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	code, body := getCode(t, url)
	require.Equal(t, want, code, "%s: %s", url, body)
	return body
}

// parseMetrics parses a scrape with the Prometheus client library's parser.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, body)
	return f
}

// metric is the sample of name with the labels given, or nil.
func metric(f map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	for _, m := range f[name].GetMetric() {
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			ok = ok && found
		}
		if ok {
			return m
		}
	}
	return nil
}

// sample is a counter's or gauge's value, -1 when it is missing.
func sample(f map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := metric(f, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}
