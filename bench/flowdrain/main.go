// Command flowdrain measures how limited kinds drain: a backlog of jobs of
// a kind limited per key, inserted key by key and interleaved, drained by
// one worker, each order in a database of its own. The two orders must
// drain alike: a full key must not hide the jobs of free keys behind it.
//
//	go run ./bench/flowdrain -jobs 3000 -keys 5 -limit 1 -work 10ms
//
// With -rate N/PERIOD the kind is rate limited too (per key), and the
// run reports jobs/s against the configured rate, the claims made and the
// worker's CPU time.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

func main() {
	var (
		admin       = flag.String("dsn", "postgres://postgres@127.0.0.1:5432/postgres", "administrative DSN; each run creates and drops a database of its own")
		jobs        = flag.Int("jobs", 3000, "jobs per run")
		keys        = flag.Int("keys", 5, "distinct keys (accounts)")
		limit       = flag.Int("limit", 1, "concurrency limit per key; 0 for none")
		rate        = flag.String("rate", "", "rate limit per key, N/PERIOD (such as 10/1s); empty for none")
		work        = flag.Duration("work", 10*time.Millisecond, "how long each handler runs")
		concurrency = flag.Int("concurrency", 10, "the worker's Concurrency")
		orders      = flag.String("orders", "by-key,interleaved", "insertion orders to run, comma-separated")
	)
	flag.Parse()
	for _, order := range strings.Split(*orders, ",") {
		r, err := run(*admin, order, *jobs, *keys, *limit, *rate, *work, *concurrency)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flowdrain:", err)
			os.Exit(1)
		}
		fmt.Printf("%-11s jobs=%d keys=%d limit=%d rate=%q work=%s: drained in %.2fs (%.1f jobs/s), %d claims (%.1f/s), worker CPU %.2fs\n",
			order, *jobs, *keys, *limit, *rate, *work, r.took.Seconds(), float64(*jobs)/r.took.Seconds(),
			r.claims, float64(r.claims)/r.took.Seconds(), r.cpu.Seconds())
	}
}

type result struct {
	took   time.Duration
	claims int64
	cpu    time.Duration
}

func run(admin, order string, jobs, keys, limit int, rate string, work time.Duration, concurrency int) (result, error) {
	ctx := context.Background()
	var res result
	name := "flowdrain_" + randomHex()
	adm, err := pgx.Connect(ctx, admin)
	if err != nil {
		return res, err
	}
	defer adm.Close(ctx)
	if _, err := adm.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return res, err
	}
	defer adm.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)") //nolint:errcheck
	// Counts the calls of the claim functions (pg_stat_user_functions).
	if _, err := adm.Exec(ctx, "ALTER DATABASE "+name+" SET track_functions = 'pl'"); err != nil {
		return res, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return res, err
	}
	u.Path = "/" + name
	dsn := u.String()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		return res, err
	}
	var keyOf string
	switch order {
	case "by-key":
		keyOf = "(g - 1) / $2 + 0 * $3" // key 0's jobs first, then key 1's…
	case "interleaved":
		keyOf = "g % $3 + 0 * $2"
	default:
		return res, fmt.Errorf("unknown order %q: want by-key or interleaved", order)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fila_jobs (kind, payload)
SELECT 'limited', jsonb_build_object('account', `+keyOf+`) FROM generate_series(1, $1::int) g ORDER BY g`,
		jobs, (jobs+keys-1)/keys, keys); err != nil {
		return res, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	kind := runtime.Kind{Name: "limited", Handler: func(ctx context.Context, job *runtime.Job) error {
		time.Sleep(work)
		if done.Add(1) == int64(jobs) {
			close(finished)
		}
		return nil
	}}
	if limit > 0 {
		kind.Limit = &runtime.Limit{Max: limit, Key: "account"}
	}
	if rate != "" {
		rl, err := parseRate(rate)
		if err != nil {
			return res, err
		}
		kind.RateLimit = rl
	}
	rt, err := runtime.New(runtime.Config{DSN: dsn, Kinds: []runtime.Kind{kind}, Concurrency: concurrency})
	if err != nil {
		return res, err
	}
	cpu0 := cpuTime()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- rt.Run(rctx) }()
	select {
	case <-finished:
	case err := <-errc:
		return res, fmt.Errorf("worker stopped: %v", err)
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("not drained after 10 minutes: %d of %d jobs done", done.Load(), jobs)
	}
	res.took = time.Since(start)
	res.cpu = cpuTime() - cpu0
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	_ = rt.Stop(stopCtx)
	cancel()
	<-errc
	time.Sleep(2 * time.Second) // the worker's backends report their function calls as they exit
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'fila_claim'`).Scan(&res.claims); err != nil {
		return res, err
	}
	return res, nil
}

// parseRate reads N/PERIOD.
func parseRate(s string) (*runtime.RateLimit, error) {
	n, p, ok := strings.Cut(s, "/")
	if !ok {
		return nil, fmt.Errorf("-rate %q: want N/PERIOD, such as 10/1s", s)
	}
	max, err := strconv.Atoi(n)
	if err != nil {
		return nil, fmt.Errorf("-rate %q: %v", s, err)
	}
	period, err := time.ParseDuration(p)
	if err != nil {
		return nil, fmt.Errorf("-rate %q: %v", s, err)
	}
	return &runtime.RateLimit{Max: max, Period: period, Key: "account"}, nil
}

// cpuTime is the CPU time this process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
