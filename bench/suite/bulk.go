package suite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/runtime"
)

// bulkRounds is how many times each way of inserting runs, alternating which
// goes first; the best round of each is kept, as the least disturbed by
// whatever else the machine was doing.
const bulkRounds = 2

// copyColumns are the columns runtime.InsertMany writes; run_at is left to
// its default, now(), as InsertMany leaves it for a job with no RunAt.
var copyColumns = []string{"queue", "kind", "payload", "priority", "max_attempts"}

// bulk times BulkJobs no-op jobs enqueued with one runtime.InsertMany call,
// next to a COPY of the same rows into the same table (pgx CopyFrom): the
// floor of a bulk insert. The table is emptied before each insert, and each
// insert is checked by counting the rows.
func (s *suite) bulk(ctx context.Context) (err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	pool, err := db.pool(ctx, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	n := s.opts.BulkJobs
	jobs := make([]runtime.InsertParams, n)
	rows := make([][]any, n)
	for i := range jobs {
		jobs[i] = runtime.InsertParams{Kind: benchKind}
		rows[i] = []any{floorQueue, benchKind, "{}", int16(0), int32(5)}
	}
	insertMany := func(ctx context.Context) error {
		ids, err := runtime.InsertMany(ctx, pool, jobs)
		if err == nil && len(ids) != n {
			err = fmt.Errorf("InsertMany returned %d ids for %d jobs", len(ids), n)
		}
		return err
	}
	copyRows := func(ctx context.Context) error {
		got, err := pool.CopyFrom(ctx, pgx.Identifier{"fila_jobs"}, copyColumns, pgx.CopyFromRows(rows))
		if err == nil && got != int64(n) {
			err = fmt.Errorf("COPY wrote %d rows of %d", got, n)
		}
		return err
	}
	prog := report.NewProgress(s.opts.Progress, "bulk", 2*bulkRounds*n)
	defer prog.Done()
	var bestInsert, bestCopy time.Duration
	for round := range bulkRounds {
		order := []func(context.Context) error{insertMany, copyRows}
		best := []*time.Duration{&bestInsert, &bestCopy}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
			best[0], best[1] = best[1], best[0]
		}
		for i, insert := range order {
			d, err := timedInsert(ctx, pool, n, insert)
			if err != nil {
				return err
			}
			if *best[i] == 0 || d < *best[i] {
				*best[i] = d
			}
			prog.Add(n)
		}
	}
	s.res.Bulk = &bench.BulkResult{
		Jobs: n, Rounds: bulkRounds,
		InsertManySec: bestInsert.Seconds(), InsertManyPerSec: float64(n) / bestInsert.Seconds(),
		CopySec: bestCopy.Seconds(), CopyPerSec: float64(n) / bestCopy.Seconds(),
	}
	return nil
}

// timedInsert empties the jobs table, times insert, and checks that the
// table then holds n rows.
func timedInsert(ctx context.Context, pool *pgxpool.Pool, n int, insert func(context.Context) error) (time.Duration, error) {
	if _, err := pool.Exec(ctx, truncateSQL); err != nil {
		return 0, fmt.Errorf("empty the table: %w", err)
	}
	begin := time.Now()
	if err := insert(ctx); err != nil {
		return 0, fmt.Errorf("bulk insert: %w", err)
	}
	d := time.Since(begin)
	var got int
	if err := pool.QueryRow(ctx, countJobsSQL).Scan(&got); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	if got != n {
		return 0, fmt.Errorf("the table holds %d jobs after inserting %d", got, n)
	}
	return d, nil
}
