package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Exactly once, checked in SQL. After a scenario the workers are stopped and
// every connection to its database is closed; then one fresh connection asks
// the database what happened to the jobs. Systems that keep a completed
// job's row say it directly: its state, and how many times it was claimed.
// Systems that delete a job when it completes (gue, graphile-worker) leave
// nothing to read but the table's statistics: rows deleted (completions)
// and rows updated (graphile-worker updates a row once per claim; gue only
// when an attempt fails). PostgreSQL writes a backend's statistics when it
// exits, which is why the check waits until the database has no other
// session.

// Statements of the exactly-once checks.
const (
	// otherSessionsSQL counts the sessions in the current database other
	// than this one.
	otherSessionsSQL = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	// tableStatsSQL reads the rows a table has had deleted and updated.
	tableStatsSQL = `SELECT n_tup_del, n_tup_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`
	// riverOnceSQL counts River's completed jobs and those attempted more
	// than once.
	riverOnceSQL = `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt > 1) FROM river_job`
	// pgBossOnceSQL counts the queue's completed jobs and those fetched
	// again (pg-boss counts a retry when a job that had started is fetched).
	pgBossOnceSQL = `SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE retry_count > 0)
FROM pgboss.job WHERE name = $1::text`
)

// quietTimeout bounds the wait for the scenario's sessions to end.
const quietTimeout = 30 * time.Second

// statsSettle bounds the wait for the last sessions' statistics to be
// counted (see deletedOnce).
const statsSettle = 5 * time.Second

// exactlyOnce checks, after the scenario stopped, that the database shows
// every job whose handler ran (ran, the warm-up included) completed, and
// none run twice. all says no job was lost, so every job inserted ran.
func (r *runner) exactlyOnce(ctx context.Context, db *database, p peer, ran int, all bool) error {
	conn, err := db.quiet(ctx)
	if err != nil {
		return fmt.Errorf("exactly once: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := p.checkOnce(ctx, conn, ran, all); err != nil {
		return fmt.Errorf("exactly once: %w", err)
	}
	return nil
}

// quiet opens a connection to the database once no other session is in it.
func (d *database) quiet(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", d.name, err)
	}
	deadline := time.Now().Add(quietTimeout)
	for {
		var n int
		if err := conn.QueryRow(ctx, otherSessionsSQL).Scan(&n); err != nil {
			_ = conn.Close(ctx)
			return nil, err
		}
		if n == 0 {
			return conn, nil
		}
		if time.Now().After(deadline) {
			_ = conn.Close(ctx)
			return nil, fmt.Errorf("%d sessions still in %s after %s", n, d.name, quietTimeout)
		}
		select {
		case <-ctx.Done():
			_ = conn.Close(ctx)
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// completedOnce compares what the database shows with the handler runs.
func completedOnce(completed, again int64, ran int) error {
	if again > 0 {
		return fmt.Errorf("%d jobs were claimed more than once", again)
	}
	if completed != int64(ran) {
		return fmt.Errorf("the database shows %d jobs completed, the handlers ran %d", completed, ran)
	}
	return nil
}

// deletedOnce checks a table whose rows are deleted on completion: deleted
// must equal the handler runs, and updated must be what one claim per job
// leaves (perClaim updates each; only when every inserted job ran, since a
// job locked but never started may have been claimed and given back).
//
// Counts below the runs are read again for up to statsSettle before they
// fail: a check that starts the moment the last session left
// pg_stat_activity may run before that session's last statistics are
// counted (graphile-worker's default at 1 000/s once read 2 705 deletions
// for 2 706 runs). A completion that never happened still fails, 5 s
// later. Counts only grow, so one above the runs fails at once.
func deletedOnce(ctx context.Context, conn *pgx.Conn, table string, ran int, all bool, perClaim int) error {
	var deleted, updated int64
	deadline := time.Now().Add(statsSettle)
	for {
		if err := conn.QueryRow(ctx, tableStatsSQL, table).Scan(&deleted, &updated); err != nil {
			return fmt.Errorf("read %s's statistics: %w", table, err)
		}
		short := deleted < int64(ran) || (all && updated < int64(perClaim*ran))
		if !short || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if deleted != int64(ran) {
		return fmt.Errorf("%s had %d rows deleted on completion, the handlers ran %d", table, deleted, ran)
	}
	if all && updated != int64(perClaim*ran) {
		return fmt.Errorf("%s had %d row updates for %d jobs: some were claimed more than once", table, updated, ran)
	}
	return nil
}

func (p *riverPeer) checkOnce(ctx context.Context, conn *pgx.Conn, ran int, _ bool) error {
	var completed, again int64
	if err := conn.QueryRow(ctx, riverOnceSQL).Scan(&completed, &again); err != nil {
		return err
	}
	return completedOnce(completed, again, ran)
}

// checkOnce for gue: it locks a job for the whole of its run and deletes it
// in the same transaction, and updates a row only to record a failed
// attempt.
func (p *guePeer) checkOnce(ctx context.Context, conn *pgx.Conn, ran int, all bool) error {
	return deletedOnce(ctx, conn, "gue_jobs", ran, all, 0)
}

func (p *nodePeer) checkOnce(ctx context.Context, conn *pgx.Conn, ran int, all bool) error {
	switch p.system {
	case systemGraphile:
		// graphile-worker claims with an UPDATE of the job's row (its
		// attempts and lock) and deletes it on completion.
		return deletedOnce(ctx, conn, "graphile_worker._private_jobs", ran, all, 1)
	default:
		var completed, again int64
		if err := conn.QueryRow(ctx, pgBossOnceSQL, nodeJobName).Scan(&completed, &again); err != nil {
			return err
		}
		return completedOnce(completed, again, ran)
	}
}
