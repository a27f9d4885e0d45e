package metrics_test

import (
	"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fila-run/fila/runtime"
	"github.com/fila-run/fila/runtime/metrics"
)

// A worker that serves its metrics, and a readiness probe, on :9464.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@postgres:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	m := metrics.New(metrics.Options{DB: pool, Kinds: []string{"send-welcome"}})
	rt, err := runtime.New(runtime.Config{
		Pool:     pool,
		Observer: m,
		Kinds: []runtime.Kind{{Name: "send-welcome", Handler: func(ctx context.Context, job *runtime.Job) error {
			return nil
		}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	m.Attach(rt)

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := rt.CheckReady(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	go func() { log.Fatal(http.ListenAndServe(":9464", nil)) }()
	log.Fatal(rt.Run(ctx))
}
