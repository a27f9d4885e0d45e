package suite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// Floor modes: what the latency of any NOTIFY-woken worker is bounded by.
const (
	SystemFloor      = "floor"
	FloorListen      = "listen"       // the notification arrives
	FloorNotifyClaim = "notify+claim" // ... and one claim statement returns the job
)

// claimSQL is the runtime's claim, called as the runtime calls it:
// $1 queue, $2 kinds, $3 batch limit, $4 lease in milliseconds, and no
// concurrency limits; one row per job, then a summary row with a NULL id.
const claimSQL = `SELECT * FROM fila_claim($1::text, $2::text[], $3::int, $4::float8, '{}', '{}', '{}')`

// floorLease is the lease the floor's claims take: longer than any run, so
// nothing it claimed is rescued while it runs.
const floorLease = time.Minute

// runFloor measures the physical floor at one rate in a fresh database: a
// bare connection LISTENing on the queue's channel and, with claim, one
// claim statement (the claimer's own SQL) run on a pooled connection the
// moment each notification arrives. No runtime code runs in between.
func (s *suite) runFloor(ctx context.Context, claim bool, rate int) (res bench.LatencyResult, err error) {
	mode := FloorListen
	if claim {
		mode = FloorNotifyClaim
	}
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()

	connCfg, err := pgconfig.Conn(db.dsn)
	if err != nil {
		return res, err
	}
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		return res, fmt.Errorf("listen connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ch, _ := channel.ForQueue("default")
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		return res, fmt.Errorf("listen: %w", err)
	}
	var pool *pgxpool.Pool
	if claim {
		if pool, err = db.pool(ctx, 1); err != nil {
			return res, err
		}
		defer pool.Close()
	}

	rec := newRecorder(s.jobsFor(rate))
	lctx, stopListening := context.WithCancel(ctx)
	listenErr := make(chan error, 1)
	go func() { listenErr <- floorLoop(lctx, conn, pool, rec) }()
	defer func() {
		stopListening()
		if lerr := <-listenErr; lerr != nil && !errors.Is(lerr, context.Canceled) {
			err = errors.Join(err, lerr)
		}
	}()
	return s.measure(ctx, db, rec, SystemFloor, mode, rate)
}

// floorLoop reads notifications until ctx ends. Without a pool each
// notification's payload, the job id, is the pick-up; with one, a claim of
// the queue's head is, when it returns.
func floorLoop(ctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool, rec *recorder) error {
	lease := float64(floorLease / time.Millisecond)
	ids := make([]int64, 0, runtime.ConcurrencyDefault)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if pool == nil {
			t1 := time.Now()
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				rec.pickedUp(id, t1)
			}
			continue
		}
		ids = ids[:0]
		rows, err := pool.Query(ctx, claimSQL, "default", []string{benchKind}, runtime.ConcurrencyDefault, lease)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		for rows.Next() {
			var id *int64
			if err := rows.Scan(&id, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil {
				rows.Close()
				return fmt.Errorf("claim: scan: %w", err)
			}
			if id != nil {
				ids = append(ids, *id)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		t1 := time.Now()
		for _, id := range ids {
			rec.pickedUp(id, t1)
		}
	}
}
