// Package metrics exports what Fila workers do as Prometheus metrics.
//
// A Metrics is both a runtime.Observer, told of every wake-up, claim and
// attempt's end on the runtime's hot path, and a prometheus.Collector that
// the caller registers on a registry of its own: nothing is registered
// globally.
//
//	m := metrics.New(metrics.Options{DB: pool})
//	rt, err := runtime.New(runtime.Config{…, Observer: m})
//	m.Attach(rt)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Counters and histograms are this process's own: pickup latency per queue
// (from the later of a job's created_at and run_at to its claim, on the
// database clock), run time per kind, outcomes, claims, rescued leases and
// wake-ups per source. Gauges of an attached runtime say whether its wake
// source is up. Gauges read from the jobs table (depth, the oldest runnable
// job's age, dead jobs, notification queue usage) describe the whole
// database, the same from every worker: aggregate them with max, not sum.
// They are read at scrape by one cheap snapshot, cached for
// Options.StatsMaxAge so that frequent or concurrent scrapes cost one read.
package metrics
