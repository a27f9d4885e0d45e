// Package stats reads what operators watch on a queue, straight from the
// jobs table: depth per queue and state, the age of the oldest runnable job
// (the delay users feel), dead jobs per kind, run time per kind, stuck
// leases, and how full PostgreSQL's notification queue is.
package stats

import (
	"context"
	"fmt"
	"time"

	"github.com/fila-run/fila/claimer"
)

// QueueState is the number of jobs of one queue in one state.
type QueueState struct {
	Queue string `json:"queue"`
	State string `json:"state"`
	Jobs  int64  `json:"jobs"`
}

// QueueLag is how long the oldest runnable pending job of a queue has waited.
type QueueLag struct {
	Queue           string  `json:"queue"`
	Runnable        int64   `json:"runnable"`           // pending with run_at in the past
	Scheduled       int64   `json:"scheduled"`          // pending with run_at in the future
	OldestAgeSecond float64 `json:"oldest_age_seconds"` // now() - min(run_at) of runnable jobs
}

// KindDead counts dead jobs of one kind.
type KindDead struct {
	Kind      string `json:"kind"`
	Dead      int64  `json:"dead"`
	LastError string `json:"last_error"` // the most recent one's
}

// KindRunTime is the run time of completed jobs of one kind over the last hour.
type KindRunTime struct {
	Kind  string  `json:"kind"`
	Jobs  int64   `json:"jobs"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
}

// Snapshot is everything `fila stats` shows.
type Snapshot struct {
	At                     time.Time     `json:"at"`
	States                 []QueueState  `json:"states"`
	Lag                    []QueueLag    `json:"lag"`
	Dead                   []KindDead    `json:"dead"`
	RunTimes               []KindRunTime `json:"run_times"`
	ExpiredLeases          int64         `json:"expired_leases"`           // running past their lease: workers died, not yet rescued
	NotificationQueueUsage float64       `json:"notification_queue_usage"` // pg_notification_queue_usage(), 0..1
}

// Collect reads a snapshot.
func Collect(ctx context.Context, db claimer.DB) (*Snapshot, error) {
	s := &Snapshot{}
	if err := db.QueryRow(ctx, "SELECT now(), pg_notification_queue_usage()").Scan(&s.At, &s.NotificationQueueUsage); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT queue, state, count(*) FROM fila_jobs GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("stats: states: %w", err)
	}
	for rows.Next() {
		var q QueueState
		if err := rows.Scan(&q.Queue, &q.State, &q.Jobs); err != nil {
			rows.Close()
			return nil, err
		}
		s.States = append(s.States, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: states: %w", err)
	}

	// The partial index on pending rows keeps this cheap however large the table.
	rows, err = db.Query(ctx, `SELECT queue,
		count(*) FILTER (WHERE run_at <= now()),
		count(*) FILTER (WHERE run_at > now()),
		coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8
		FROM fila_jobs WHERE state = 'pending' GROUP BY queue ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("stats: lag: %w", err)
	}
	for rows.Next() {
		var l QueueLag
		if err := rows.Scan(&l.Queue, &l.Runnable, &l.Scheduled, &l.OldestAgeSecond); err != nil {
			rows.Close()
			return nil, err
		}
		s.Lag = append(s.Lag, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: lag: %w", err)
	}

	rows, err = db.Query(ctx, `SELECT kind, count(*),
		coalesce((array_agg(last_error ORDER BY finished_at DESC NULLS LAST))[1], '')
		FROM fila_jobs WHERE state = 'dead' GROUP BY kind ORDER BY count(*) DESC, kind`)
	if err != nil {
		return nil, fmt.Errorf("stats: dead: %w", err)
	}
	for rows.Next() {
		var d KindDead
		if err := rows.Scan(&d.Kind, &d.Dead, &d.LastError); err != nil {
			rows.Close()
			return nil, err
		}
		s.Dead = append(s.Dead, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: dead: %w", err)
	}

	rows, err = db.Query(ctx, `SELECT kind, count(*),
		(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) * 1000)::float8,
		(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) * 1000)::float8
		FROM fila_jobs
		WHERE state = 'completed' AND finished_at > now() - interval '1 hour'
		GROUP BY kind ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("stats: run times: %w", err)
	}
	for rows.Next() {
		var k KindRunTime
		if err := rows.Scan(&k.Kind, &k.Jobs, &k.P50Ms, &k.P95Ms); err != nil {
			rows.Close()
			return nil, err
		}
		s.RunTimes = append(s.RunTimes, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: run times: %w", err)
	}

	if err := db.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE state = 'running' AND lease_until < now()`).Scan(&s.ExpiredLeases); err != nil {
		return nil, fmt.Errorf("stats: leases: %w", err)
	}
	return s, nil
}
