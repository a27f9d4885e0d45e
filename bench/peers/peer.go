package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// startFunc is called as the first thing in every job handler with the
// sequence number the job carries and the time the handler began. Warm-up
// and drain jobs carry a negative sequence number.
type startFunc func(seq int64, at time.Time)

// peer is one job system in one configuration, living in one fresh database.
// The scenarios drive every system through this interface, so every peer is
// measured by the same producer, clock and completion check.
type peer interface {
	// setup creates the system's schema in pool's database and builds its
	// client; nothing runs yet. Handlers call started.
	setup(ctx context.Context, pool *pgxpool.Pool, started startFunc) error
	// insertTx inserts one job carrying seq inside tx, through the system's
	// own transactional insert API. The caller commits.
	insertTx(ctx context.Context, tx pgx.Tx, seq int64) error
	// insertMany inserts n jobs (sequence number -1) through the system's
	// batch insert API.
	insertMany(ctx context.Context, n int) error
	// start starts the workers and returns once they are running.
	start(ctx context.Context) error
	// stop stops the workers, waiting for running handlers until ctx expires.
	stop(ctx context.Context) error
	// pending counts the jobs not yet completed, as the database sees them.
	pending(ctx context.Context) (int, error)
	// poolSize is how many connections the system's pool needs.
	poolSize() int
	// checkOnce checks in SQL on conn, once the workers stopped and every
	// other session left the database, that the jobs whose handlers ran
	// (ran, the warm-up included) were completed exactly once. all says
	// every job inserted ran.
	checkOnce(ctx context.Context, conn *pgx.Conn, ran int, all bool) error
}

// spec names a peer configuration and builds fresh instances of it, one per
// scenario.
type spec struct {
	system  string
	mode    string
	workers int
	new     func() peer
}

// jobArgs is the payload both systems carry: only the sequence number that
// ties a handler run back to its producer's commit time.
type jobArgs struct {
	Seq int64 `json:"seq"`
}

// drainSeq marks jobs whose pickup latency is not recorded (warm-up, drain).
const drainSeq = -1
