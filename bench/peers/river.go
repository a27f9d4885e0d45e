package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverPoolConns sizes River's pgx pool. River's workers hold no connection
// while a no-op job runs (completions are batched), so a small pool serves
// even 1000 workers; 20 keeps the whole run well inside max_connections on a
// machine shared with other tests.
const riverPoolConns = 20

// riverArgs is jobArgs as a River job kind.
type riverArgs jobArgs

// Kind names the job kind River stores in river_job.kind.
func (riverArgs) Kind() string { return "peers_noop" }

// riverWorker is the no-op handler.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	started startFunc
}

// Work records the pickup time before anything else and returns.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	at := time.Now()
	w.started(job.Args.Seq, at)
	return nil
}

// riverPeer is River in one configuration. Zero values leave River's own
// defaults in place, so the "default" mode differs from a stock client only
// in the queue's worker count.
type riverPeer struct {
	maxWorkers    int
	fetchCooldown time.Duration // 0: River's FetchCooldownDefault (100 ms)

	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

func riverSpec(mode string, maxWorkers int, fetchCooldown time.Duration) spec {
	return spec{
		system:  "river",
		mode:    mode,
		workers: maxWorkers,
		new: func() peer {
			return &riverPeer{maxWorkers: maxWorkers, fetchCooldown: fetchCooldown}
		},
	}
}

// riverLogger sends River's warnings and errors to stderr; by default River
// writes them to stdout, where they would break up the result tables.
func riverLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (p *riverPeer) setup(ctx context.Context, pool *pgxpool.Pool, started startFunc) error {
	p.pool = pool
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: riverLogger()})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverWorker{started: started}); err != nil {
		return fmt.Errorf("river worker: %w", err)
	}
	p.client, err = river.NewClient(driver, &river.Config{
		FetchCooldown: p.fetchCooldown,
		Logger:        riverLogger(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: p.maxWorkers}},
		Workers:       workers,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	return nil
}

func (p *riverPeer) insertTx(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := p.client.InsertTx(ctx, tx, riverArgs{Seq: seq}, nil)
	return err
}

func (p *riverPeer) insertMany(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i].Args = riverArgs{Seq: drainSeq}
	}
	got, err := p.client.InsertManyFast(ctx, params)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("InsertManyFast inserted %d of %d jobs", got, n)
	}
	return nil
}

func (p *riverPeer) start(ctx context.Context) error { return p.client.Start(ctx) }

func (p *riverPeer) stop(ctx context.Context) error {
	if p.client == nil {
		return nil
	}
	return p.client.Stop(ctx)
}

// pending counts jobs River has not recorded as completed. Completions are
// written in batches after the handler returns, so this lags the handlers a
// little, and the drain time includes that lag: a job is done when the
// database says so.
func (p *riverPeer) pending(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state <> 'completed'").Scan(&n)
	return n, err
}

func (p *riverPeer) poolSize() int { return riverPoolConns }
