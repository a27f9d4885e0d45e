package suite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/internal/channel"
)

// Floor modes: what the latency of any NOTIFY-woken worker is bounded by.
const (
	SystemFloor      = bench.SystemFloor
	FloorListen      = bench.FloorListen      // the notification arrives
	FloorListenClaim = bench.FloorListenClaim // ... and the minimal claim returns the job
)

// floorLease is the lease the floor's claims take: longer than any run, so
// nothing it claimed is rescued while it runs.
const floorLease = time.Minute

// floorClaimStmt names the floor's prepared claim on its connection.
const floorClaimStmt = "fila_bench_floor_claim"

// floorQueue is the queue every scenario inserts into.
const floorQueue = "default"

// runFloor measures one floor at one rate in a fresh database: a bare
// connection LISTENing on the queue's channel and, for FloorListenClaim, the
// minimal one-row claim run on a direct connection of its own the moment
// each notification arrives, until the queue is empty. Nothing of the
// runtime runs in between.
func (s *suite) runFloor(ctx context.Context, mode string, rate int) (res bench.LatencyResult, err error) {
	res, _, err = s.runFloorTraced(ctx, mode, rate, nil)
	return res, err
}

// runFloorTraced is runFloor with the claimer's trace set (see
// floorClaimer); it also returns the run's recorder.
func (s *suite) runFloorTraced(ctx context.Context, mode string, rate int, trace func(id int64, notified, sent, replied time.Time)) (res bench.LatencyResult, rec *recorder, err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, rec, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()

	conn, err := listenConn(ctx, db.dsn, floorQueue)
	if err != nil {
		return res, rec, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var claim *floorClaimer
	if mode == FloorListenClaim {
		if claim, err = newFloorClaimer(ctx, db.dsn); err != nil {
			return res, rec, err
		}
		claim.trace = trace
		defer claim.close(context.WithoutCancel(ctx))
	}

	rec = newRecorder(s.jobsFor(rate))
	lctx, stopListening := context.WithCancel(ctx)
	listenErr := make(chan error, 1)
	go func() { listenErr <- floorLoop(lctx, conn, claim, rec.pickedUp) }()
	defer func() {
		stopListening()
		if lerr := <-listenErr; lerr != nil && !errors.Is(lerr, context.Canceled) {
			err = errors.Join(err, lerr)
		}
	}()
	res, err = s.measure(ctx, db, rec, SystemFloor, mode, rate, ScenarioLatency)
	return res, rec, err
}

// listenConn opens a direct connection and LISTENs on queue's channel.
func listenConn(ctx context.Context, dsn, queue string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listen connection: %w", err)
	}
	ch, err := channel.ForQueue(queue)
	if err == nil {
		// Producers notify only while someone says it sleeps on the queue
		// (migration 0005), as a program that LISTENs by itself does.
		_, err = conn.Exec(ctx, `INSERT INTO fila_sleepers (queue, worker) VALUES ($1::text, 'bench-floor')
			ON CONFLICT DO NOTHING`, queue)
	}
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize())
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// floorClaimer runs the minimal claim as a named prepared statement on a
// direct connection of its own: parsed and planned once, one round trip per
// job, no pool in between.
type floorClaimer struct {
	conn *pgx.Conn
	// trace, if set, is told of each claim that returned a job: when the
	// notification that led to it arrived, when the claim was sent and when
	// its reply was read (the breakdown scenario's steps).
	trace func(id int64, notified, sent, replied time.Time)
}

func newFloorClaimer(ctx context.Context, dsn string) (*floorClaimer, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("claim connection: %w", err)
	}
	if _, err := conn.Prepare(ctx, floorClaimStmt, floorClaimSQL); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("prepare the floor's claim: %w", err)
	}
	return &floorClaimer{conn: conn}, nil
}

func (c *floorClaimer) close(ctx context.Context) { _ = c.conn.Close(ctx) }

// claimAll claims one job at a time from the head of queue until none is
// left, so a burst behind one notification is drained, and tells claimed
// of each job the moment its claim returns. It returns how many it claimed.
func (c *floorClaimer) claimAll(ctx context.Context, queue string, notified time.Time, claimed func(id int64, at time.Time)) (int, error) {
	for n := 0; ; n++ {
		var id int64
		var sent time.Time
		if c.trace != nil {
			sent = time.Now()
		}
		err := c.conn.QueryRow(ctx, floorClaimStmt, queue, floorLease).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("floor claim: %w", err)
		}
		replied := time.Now()
		claimed(id, replied)
		if c.trace != nil {
			c.trace(id, notified, sent, replied)
		}
	}
}

// floorLoop reads notifications until ctx ends. Without a claimer each
// notification's payload, the job id, is the pick-up; with one, each claim
// of the queue's head is, as it returns.
func floorLoop(ctx context.Context, conn *pgx.Conn, claim *floorClaimer, pickedUp func(int64, time.Time)) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notified := time.Now()
		if claim == nil {
			t1 := notified
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				pickedUp(id, t1)
			}
			continue
		}
		if _, err := claim.claimAll(ctx, floorQueue, notified, pickedUp); err != nil {
			return err
		}
	}
}
