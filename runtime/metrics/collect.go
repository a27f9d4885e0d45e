package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fila-run/fila/runtime"
)

var (
	wakeSourceUpDesc = prometheus.NewDesc("fila_wake_source_up",
		"1 when the wake source (LISTEN in notify mode, logical replication in wal mode) of every attached runtime of this mode is up, else 0: while it is down, jobs are found by the fast poll, late. Absent in poll mode, which has none.",
		[]string{"mode"}, nil)
	reconnectsDesc = prometheus.NewDesc("fila_wake_source_reconnects_total",
		"Reconnections of the wake source after a lost connection, over the attached runtimes of this mode.",
		[]string{"mode"}, nil)
	runningDesc = prometheus.NewDesc("fila_handlers_running",
		"Handlers running now in the attached runtimes.", nil, nil)
)

// Describe sends the descriptions of every metric Metrics exports.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.vectors() {
		c.Describe(ch)
	}
	ch <- wakeSourceUpDesc
	ch <- reconnectsDesc
	ch <- runningDesc
	m.table.describe(ch)
}

// Collect sends the current value of every metric; the jobs table's gauges
// come from a snapshot at most Options.StatsMaxAge old.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.vectors() {
		c.Collect(ch)
	}
	m.collectRuntimes(ch)
	m.table.collect(ch)
}

func (m *Metrics) vectors() []prometheus.Collector {
	return []prometheus.Collector{m.pickup, m.run, m.outcomes, m.claims, m.empty, m.claimed, m.rescued, m.wakeups}
}

// collectRuntimes reports the attached runtimes' wake sources per mode and
// their running handlers.
func (m *Metrics) collectRuntimes(ch chan<- prometheus.Metric) {
	m.runtimesMu.Lock()
	rts := slices.Clone(m.runtimes)
	m.runtimesMu.Unlock()
	if len(rts) == 0 {
		return
	}
	type source struct {
		up         bool
		reconnects uint64
	}
	modes := map[runtime.Mode]*source{}
	var order []runtime.Mode
	running := 0
	for _, rt := range rts {
		s := rt.Stats()
		running += s.Running
		mode := rt.Mode()
		if mode == runtime.ModePoll {
			continue
		}
		src := modes[mode]
		if src == nil {
			src = &source{up: true}
			modes[mode] = src
			order = append(order, mode)
		}
		src.up = src.up && s.Healthy
		src.reconnects += s.Reconnects
	}
	ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(running))
	for _, mode := range order {
		src := modes[mode]
		up := 0.0
		if src.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(wakeSourceUpDesc, prometheus.GaugeValue, up, string(mode))
		ch <- prometheus.MustNewConstMetric(reconnectsDesc, prometheus.CounterValue, float64(src.reconnects), string(mode))
	}
}
