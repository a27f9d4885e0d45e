package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/ui"
)

func init() {
	register("ui", "serve the web dashboard: queues, charts, jobs, dead jobs; actions with an admin token", runUI)
}

// uiShutdownTimeout bounds how long the dashboard waits for requests in
// flight after SIGTERM.
const uiShutdownTimeout = 10 * time.Second

func runUI(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "HOST:PORT to serve the dashboard on (port 0 picks a free one)")
	token := fs.String("admin-token", "", "token that allows retry, cancel, delete, pause and resume (default: $"+ui.AdminTokenEnv+"; without one the dashboard is read-only)")
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *token == "" {
		*token = os.Getenv(ui.AdminTokenEnv)
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT such as 127.0.0.1:8080", *addr)
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := ui.New(pool, ui.Options{AdminToken: *token}, g.log())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr %s: cannot listen: %w", *addr, err)
	}
	return serveUI(ctx, ln, h, *token != "", g.log())
}

// serveUI serves h on ln until ctx is cancelled, then lets requests in
// flight finish for uiShutdownTimeout.
func serveUI(ctx context.Context, ln net.Listener, h http.Handler, actions bool, log *zap.Logger) error {
	log = log.Named("ui")
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("dashboard serving", zap.String("url", "http://"+ln.Addr().String()+"/"), zap.Bool("actions", actions))
	select {
	case err := <-errc:
		return fmt.Errorf("dashboard: %w", err)
	case <-ctx.Done():
	}
	log.Info("dashboard stopping")
	sctx, cancel := context.WithTimeout(context.Background(), uiShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running past the deadline are cut off.
		log.Warn("dashboard requests cut off at shutdown", zap.Error(err))
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}
