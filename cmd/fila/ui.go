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

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/ui"
)

func init() {
	register("ui", "serve the web dashboard: queues, charts, jobs, dead jobs; actions with an admin token", runUI)
}

// uiShutdownTimeout bounds how long the dashboard waits for requests in
// flight once its context is cancelled.
const uiShutdownTimeout = 10 * time.Second

// uiTokenUsage documents --admin-token, for `fila ui` and `fila work`.
const uiTokenUsage = "token that allows retry, cancel, delete, pause and resume from the dashboard (default: $" + ui.AdminTokenEnv + "; without one the dashboard is read-only)"

func runUI(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "HOST:PORT to serve the dashboard on (port 0 picks a free one)")
	token := fs.String("admin-token", "", uiTokenUsage)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := checkUIAddr("--addr", *addr); err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	wait, err := startDashboard(ctx, "--addr", *addr, *token, pool, g.log())
	if err != nil {
		return err
	}
	return wait()
}

// checkUIAddr refuses an address that is not HOST:PORT, naming the flag.
func checkUIAddr(flagName, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: want HOST:PORT such as 127.0.0.1:8080", flagName, addr)
	}
	return nil
}

// startDashboard serves the dashboard on addr, reading and changing the
// jobs of pool's database, until ctx is cancelled; then it lets requests in
// flight finish for uiShutdownTimeout. It returns once it listens, or with
// an error naming flagName when addr cannot be listened on; wait returns
// when the dashboard has stopped. token is the admin token, "" to take it
// from $FILA_UI_ADMIN_TOKEN; without either the dashboard is read-only.
// `fila ui` uses it, and so can `fila work --ui-addr`.
func startDashboard(ctx context.Context, flagName, addr, token string, pool *pgxpool.Pool, log *zap.Logger) (wait func() error, err error) {
	if token == "" {
		token = os.Getenv(ui.AdminTokenEnv)
	}
	h, err := ui.New(pool, ui.Options{AdminToken: token}, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: cannot listen: %w", flagName, addr, err)
	}
	log = log.Named("ui")
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("dashboard serving", zap.String("url", "http://"+ln.Addr().String()+"/"), zap.Bool("actions", token != ""))
	return func() error {
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
	}, nil
}
