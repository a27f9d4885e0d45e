package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
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

// Usage of the dashboard's access flags, for `fila ui` and `fila work`.
const (
	uiTokenUsage = "token that allows reading the dashboard and retry, cancel, delete, pause and resume from it (default: $" + ui.AdminTokenEnv +
		"; without one the dashboard is read-only); at least 16 characters"
	uiReadTokenUsage = "token that allows reading the dashboard, payloads included, and nothing else (default: $" + ui.ReadTokenEnv +
		"); at least 16 characters"
	uiPublicReadUsage = "let anyone who reaches the dashboard read it, payloads included, without a token; with a token set, every page needs one unless this is given (without any token the dashboard is always readable)"
)

func runUI(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "HOST:PORT to serve the dashboard on (port 0 picks a free one)")
	access := uiAccess{adminFrom: "--admin-token", readFrom: "--read-token", publicFrom: "--public-read"}
	fs.StringVar(&access.adminToken, "admin-token", "", uiTokenUsage)
	fs.StringVar(&access.readToken, "read-token", "", uiReadTokenUsage)
	fs.Var(&access.publicRead, "public-read", uiPublicReadUsage)
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if err := checkUIAddr("--addr", *addr); err != nil {
		return err
	}
	if err := access.resolve(os.LookupEnv); err != nil {
		return err
	}
	pool, err := g.migratedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	wait, err := startDashboard(ctx, "--addr", *addr, access, pool, g.log())
	if err != nil {
		return err
	}
	return wait()
}

// optionalBool is a boolean flag that knows whether it was given.
type optionalBool struct{ value, set bool }

func (b *optionalBool) String() string   { return strconv.FormatBool(b.value) }
func (b *optionalBool) IsBoolFlag() bool { return true }
func (b *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.value, b.set = v, true
	return nil
}

// uiAccess is who the dashboard lets in, and where each setting came from
// (a flag, a variable, a file's key), for the errors that name it.
type uiAccess struct {
	adminToken, adminFrom string
	readToken, readFrom   string
	publicRead            optionalBool
	publicFrom            string
}

// resolve takes each token the flags or the file did not give from its
// environment variable, and refuses a token shorter than ui.TokenMinLen,
// a read token equal to the admin token, and --public-read=false with no
// token to log in with, naming where each came from.
func (a *uiAccess) resolve(getenv func(string) (string, bool)) error {
	if a.adminToken == "" {
		if v, ok := getenv(ui.AdminTokenEnv); ok && v != "" {
			a.adminToken, a.adminFrom = v, "$"+ui.AdminTokenEnv
		}
	}
	if a.readToken == "" {
		if v, ok := getenv(ui.ReadTokenEnv); ok && v != "" {
			a.readToken, a.readFrom = v, "$"+ui.ReadTokenEnv
		}
	}
	for _, t := range []struct{ from, value string }{{a.adminFrom, a.adminToken}, {a.readFrom, a.readToken}} {
		if t.value != "" && len(t.value) < ui.TokenMinLen {
			return fmt.Errorf("%s: the token is %s long: at least %d are needed (such as openssl rand -hex 16)", t.from, plural(len(t.value), "character"), ui.TokenMinLen)
		}
	}
	if a.readToken != "" && a.readToken == a.adminToken {
		return fmt.Errorf("%s is the same token as %s: give readers a token of their own", a.readFrom, a.adminFrom)
	}
	if a.publicRead.set && !a.publicRead.value && a.adminToken == "" && a.readToken == "" {
		return fmt.Errorf("%s=false needs a token to log in with: give a read or an admin token too", a.publicFrom)
	}
	return nil
}

// public reports whether anyone who reaches the dashboard reads it.
func (a *uiAccess) public() bool {
	return a.publicRead.value || (a.adminToken == "" && a.readToken == "")
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
// when the dashboard has stopped. access says who may read and act
// (resolved: see uiAccess.resolve). `fila ui` uses it, and so can `fila
// work --ui-addr`.
func startDashboard(ctx context.Context, flagName, addr string, access uiAccess, pool *pgxpool.Pool, log *zap.Logger) (wait func() error, err error) {
	h, err := ui.New(pool, ui.Options{AdminToken: access.adminToken, ReadToken: access.readToken, PublicRead: access.publicRead.value}, log)
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
	log.Info("dashboard serving", zap.String("url", "http://"+ln.Addr().String()+"/"), zap.Bool("actions", access.adminToken != ""),
		zap.Bool("public_read", access.public()))
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); access.public() && !isLoopback(host) {
		log.Warn("the dashboard, payloads included, is readable by anyone who reaches it: give it a read or admin token, or serve it on a loopback address",
			zap.String("addr", ln.Addr().String()))
	}
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

// isLoopback reports whether host is a loopback address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
