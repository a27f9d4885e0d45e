package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vgarvardt/gue/v5"
	"github.com/vgarvardt/gue/v5/adapter/pgxv5"
	guezap "github.com/vgarvardt/gue/v5/adapter/zap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

//go:embed gue_schema.sql
var gueSchema string

// gueJobType is the job type both the producer and the work map use.
const gueJobType = "peers_noop"

// gueBatch bounds one EnqueueBatch call: gue sends 8 parameters per job in a
// single INSERT, and PostgreSQL accepts at most 65535 parameters.
const gueBatch = 5000

// guePeer is gue in one configuration. gue has no LISTEN/NOTIFY: each worker
// of a WorkerPool polls, holding one connection (and one transaction) per job
// it works, and sleeps PollInterval whenever a poll finds nothing.
type guePeer struct {
	workers      int
	pollInterval time.Duration    // 0: gue's default (5 s)
	pollStrategy gue.PollStrategy // "": gue's default (PriorityPollStrategy)
	log          *zap.Logger

	pool   *pgxpool.Pool
	client *gue.Client
	wp     *gue.WorkerPool
	cancel context.CancelFunc
	done   chan error
}

func gueSpec(mode string, workers int, pollInterval time.Duration, strategy gue.PollStrategy, log *zap.Logger) spec {
	return spec{
		system:  "gue",
		mode:    mode,
		workers: workers,
		new: func() peer {
			return &guePeer{workers: workers, pollInterval: pollInterval, pollStrategy: strategy, log: log}
		},
	}
}

func (p *guePeer) setup(ctx context.Context, pool *pgxpool.Pool, started startFunc) error {
	p.pool = pool
	if _, err := pool.Exec(ctx, gueSchema); err != nil {
		return fmt.Errorf("gue schema: %w", err)
	}
	// gue logs every worker's start and stop at Info; only its errors matter here.
	logger := guezap.New(p.log.Named("gue").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel)))
	var err error
	p.client, err = gue.NewClient(pgxv5.NewConnPool(pool), gue.WithClientLogger(logger))
	if err != nil {
		return fmt.Errorf("gue client: %w", err)
	}
	wm := gue.WorkMap{gueJobType: func(_ context.Context, j *gue.Job) error {
		at := time.Now()
		var args jobArgs
		if err := json.Unmarshal(j.Args, &args); err != nil {
			return fmt.Errorf("job args: %w", err)
		}
		started(args.Seq, at)
		return nil
	}}
	// Graceful shutdown gives handlers (and the poll and completion around
	// them) a context that stop does not cancel: without it, stopping the
	// pool mid-job aborts the job's DELETE and logs an error per worker.
	opts := []gue.WorkerPoolOption{gue.WithPoolLogger(logger), gue.WithPoolGracefulShutdown(nil)}
	if p.pollInterval > 0 {
		opts = append(opts, gue.WithPoolPollInterval(p.pollInterval))
	}
	if p.pollStrategy != "" {
		opts = append(opts, gue.WithPoolPollStrategy(p.pollStrategy))
	}
	p.wp, err = gue.NewWorkerPool(p.client, wm, p.workers, opts...)
	if err != nil {
		return fmt.Errorf("gue worker pool: %w", err)
	}
	return nil
}

func gueJob(seq int64) (*gue.Job, error) {
	args, err := json.Marshal(jobArgs{Seq: seq})
	if err != nil {
		return nil, err
	}
	return &gue.Job{Type: gueJobType, Args: args}, nil
}

func (p *guePeer) insertTx(ctx context.Context, tx pgx.Tx, seq int64) error {
	j, err := gueJob(seq)
	if err != nil {
		return err
	}
	return p.client.EnqueueTx(ctx, j, pgxv5.NewTx(tx))
}

func (p *guePeer) insertMany(ctx context.Context, n int) error {
	for done := 0; done < n; {
		size := min(gueBatch, n-done)
		jobs := make([]*gue.Job, size)
		for i := range jobs {
			j, err := gueJob(drainSeq)
			if err != nil {
				return err
			}
			jobs[i] = j
		}
		if err := p.client.EnqueueBatch(ctx, jobs); err != nil {
			return err
		}
		done += size
	}
	return nil
}

// start runs the worker pool on a context of its own: the pool's Run blocks
// until that context is cancelled, which stop does.
func (p *guePeer) start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.done = make(chan error, 1)
	go func() { p.done <- p.wp.Run(ctx) }()
	return nil
}

func (p *guePeer) stop(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	select {
	case err := <-p.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("gue worker pool did not stop: %w", ctx.Err())
	}
}

// pending counts rows left in gue_jobs: gue deletes a job when it is done.
func (p *guePeer) pending(ctx context.Context) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, "SELECT count(*) FROM gue_jobs").Scan(&n)
	return n, err
}

// poolSize gives each worker its own connection, which it holds for the
// whole of every job, plus a little room for inserts and the pending check.
func (p *guePeer) poolSize() int { return p.workers + 2 }
