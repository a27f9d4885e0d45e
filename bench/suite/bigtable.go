package suite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
)

// seedChunk is how many rows one seeding statement inserts: big enough to be
// fast, small enough for the progress line to move.
const seedChunk = 100000

// bigTable measures pickup latency in notify mode on an empty jobs table,
// then seeds the same table with a long completed history and a large
// backlog scheduled a day ahead, vacuums and analyzes it as autovacuum
// would, and measures again with a new runtime. The claim reads only the
// runnable pending rows, so neither should slow it.
func (s *suite) bigTable(ctx context.Context) (err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	rate := s.opts.BigTableRate
	empty, err := s.runFilaOn(ctx, db, ModeNotify, rate, "bigtable empty")
	if err != nil {
		return fmt.Errorf("empty table: %w", err)
	}
	begin := time.Now()
	res, err := s.seed(ctx, db)
	if err != nil {
		return err
	}
	res.SeedSeconds = time.Since(begin).Seconds()
	res.Empty = empty
	if res.Big, err = s.runFilaOn(ctx, db, ModeNotify, rate, "bigtable seeded"); err != nil {
		return fmt.Errorf("seeded table: %w", err)
	}
	s.res.BigTable = &res
	return nil
}

// seed fills db's jobs table with BigTableCompleted completed jobs and
// BigTableScheduled jobs due a day from now, with the insert trigger off
// meanwhile, then vacuums and analyzes the table, and returns what the
// table holds afterwards, counted.
func (s *suite) seed(ctx context.Context, db *database) (res bench.BigTableResult, err error) {
	if err := db.setNotifyTrigger(ctx, false); err != nil {
		return res, err
	}
	defer func() {
		if terr := db.setNotifyTrigger(context.WithoutCancel(ctx), true); terr != nil {
			err = errors.Join(err, terr)
		}
	}()
	pool, err := db.pool(ctx, 1)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	completed, scheduled := s.opts.BigTableCompleted, s.opts.BigTableScheduled
	prog := report.NewProgress(s.opts.Progress, "bigtable: seed", completed+scheduled)
	defer prog.Done()
	for _, part := range []struct {
		sql string
		n   int
	}{{seedCompletedSQL, completed}, {seedScheduledSQL, scheduled}} {
		for done := 0; done < part.n; {
			k := min(seedChunk, part.n-done)
			if _, err := pool.Exec(ctx, part.sql, k); err != nil {
				return res, fmt.Errorf("seed: %w", err)
			}
			done += k
			prog.Add(k)
		}
	}
	if _, err := pool.Exec(ctx, vacuumJobsSQL); err != nil {
		return res, fmt.Errorf("vacuum after seeding: %w", err)
	}
	// Seeding and vacuuming dirtied hundreds of megabytes that the server
	// would otherwise write out while the second run measures, slowing
	// every commit: write them now, so that the run measures the table's
	// size, not the aftermath of loading it. Without the privilege (a
	// superuser or pg_checkpoint), say so and measure anyway.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		s.res.note("bigtable: no CHECKPOINT after seeding (%v): the seeded run may pay for writing out the seed", err)
	} else {
		res.Checkpointed = true
	}
	if err := pool.QueryRow(ctx, seededSQL).Scan(&res.Completed, &res.Scheduled); err != nil {
		return res, fmt.Errorf("count the seeded rows: %w", err)
	}
	if res.Completed != int64(completed) || res.Scheduled != int64(scheduled) {
		return res, fmt.Errorf("seeded %d completed and %d scheduled rows, want %d and %d",
			res.Completed, res.Scheduled, completed, scheduled)
	}
	var idx, live, dead, deleted int64
	if err := pool.QueryRow(ctx, tableStatsSQL).Scan(&res.TableBytes, &idx, &live, &dead, &deleted); err != nil {
		return res, fmt.Errorf("table size: %w", err)
	}
	return res, nil
}
