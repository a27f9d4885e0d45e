package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fila-run/fila/runtime/metrics"
)

// readyTimeout bounds /readyz's check of the database: a probe that hangs
// tells an orchestrator less than one that says why it failed.
const readyTimeout = 2 * time.Second

// serverShutdownTimeout bounds the wait for scrapes and probes in flight
// once the worker has stopped.
const serverShutdownTimeout = 5 * time.Second

// endpoints are fila work's HTTP servers: /metrics on --metrics-addr,
// /livez and /readyz on --health-addr; one server when both are the same.
type endpoints struct {
	servers []*http.Server
	done    chan struct{} // closed when every server's Serve has returned
	log     *zap.Logger
}

// serveEndpoints listens on the addresses given (none when both are empty)
// and serves until shutdown; /readyz answers what ready says (every
// runtime of the process works as configured). An address that cannot be
// listened on is an error naming its setting as names does; nothing is
// left listening then.
func serveEndpoints(metricsAddr, healthAddr string, names func(keys ...string) string, m *metrics.Metrics, ready func(context.Context) error, log *zap.Logger) (*endpoints, error) {
	log = log.Named("http")
	e := &endpoints{done: make(chan struct{}), log: log}
	muxes := map[string]*http.ServeMux{}
	var order []string
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
			order = append(order, addr)
		}
		return muxes[addr]
	}
	if metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux(metricsAddr).Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog:      zap.NewStdLog(log),
			ErrorHandling: promhttp.ContinueOnError,
		}))
	}
	if healthAddr != "" {
		h := mux(healthAddr)
		h.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "ok")
		})
		h.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				http.Error(w, oneLineError(err), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}

	var listeners []net.Listener
	for _, addr := range order {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			var keys []string
			if addr == metricsAddr {
				keys = append(keys, "metrics_addr")
			}
			if addr == healthAddr {
				keys = append(keys, "health_addr")
			}
			return nil, fmt.Errorf("%s %s: cannot listen: %w", names(keys...), addr, err)
		}
		listeners = append(listeners, ln)
	}
	served := make(chan struct{}, len(listeners))
	for i, ln := range listeners {
		srv := &http.Server{Handler: muxes[order[i]], ReadHeaderTimeout: 10 * time.Second}
		e.servers = append(e.servers, srv)
		var paths []string
		if order[i] == metricsAddr {
			paths = append(paths, "/metrics")
		}
		if order[i] == healthAddr {
			paths = append(paths, "/livez", "/readyz")
		}
		log.Info("serving", zap.String("addr", ln.Addr().String()), zap.Strings("paths", paths))
		go func() {
			defer func() { served <- struct{}{} }()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error("server stopped; the worker runs on without it", zap.String("addr", ln.Addr().String()), zap.Error(err))
			}
		}()
	}
	go func() {
		for range listeners {
			<-served
		}
		close(e.done)
	}()
	return e, nil
}

// shutdown stops the servers, letting requests in flight finish for at
// most serverShutdownTimeout.
func (e *endpoints) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), serverShutdownTimeout)
	defer cancel()
	for _, srv := range e.servers {
		if err := srv.Shutdown(ctx); err != nil {
			e.log.Warn("requests cut short at shutdown", zap.Error(err))
			_ = srv.Close()
		}
	}
	<-e.done
	e.log.Info("stopped serving")
}
