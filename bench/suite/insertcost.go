package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/internal/pgcluster"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// insertPlainTable has fila_jobs' columns, defaults and identity, and
// nothing else: no index, constraint or trigger. Its first insert in a
// session is the floor of a producer's that connects for one job.
const insertPlainTable = "fila_bench_plain_jobs"

// insertStatement is the insert both tables get: one job, its kind and
// payload, as a script or a request handler writes it.
const insertStatement = "INSERT INTO %s (kind, payload) VALUES ($1, $2) RETURNING id"

// insertCost measures what a producer that connects for each job pays: the
// first INSERT of a fresh session (cold: every catalog entry, the triggers'
// PL/pgSQL and its plans still to load) and the second (warm), into
// fila_jobs and into a plain table with the same columns, sessions
// alternating between them, and through runtime.Insert (Fila's own insert
// path, which also checks its options). It runs on the server as given and,
// when that server does not preload PL/pgSQL (shared_preload_libraries),
// again on a throwaway cluster that does, so one run shows what the setting
// is worth.
func (s *suite) insertCost(ctx context.Context) error {
	n := s.opts.InsertSessions
	prog := report.NewProgress(s.opts.Progress, "insert", 2*3*n)
	defer prog.Done()
	given, err := s.insertCostOn(ctx, s.srv, "as given", prog)
	if err != nil {
		return err
	}
	s.res.InsertCost = append(s.res.InsertCost, given)
	if given.PLpgSQLPreloaded {
		prog.Add(3 * n)
		return nil
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Logger: s.log,
		Settings: map[string]string{"shared_preload_libraries": "plpgsql"}})
	if err != nil {
		prog.Add(3 * n)
		s.res.note("insert: no throwaway cluster with PL/pgSQL preloaded to compare with: %v", err)
		return nil
	}
	preloaded := &server{adminDSN: report.PlainTransport(c.DSN("postgres")), cluster: c, log: s.log}
	defer func() { err = errors.Join(err, preloaded.Close()) }()
	if err := preloaded.connect(ctx); err != nil {
		return fmt.Errorf("throwaway cluster: %w", err)
	}
	row, err := s.insertCostOn(ctx, preloaded, "throwaway cluster, shared_preload_libraries = plpgsql", prog)
	if err != nil {
		return err
	}
	s.res.InsertCost = append(s.res.InsertCost, row)
	return nil
}

// insertCostOn measures one server's row of the insert scenario in a fresh
// database of its own.
func (s *suite) insertCostOn(ctx context.Context, srv *server, name string, prog *report.Progress) (res bench.InsertCostResult, err error) {
	db, err := srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	if err := db.exec(ctx, "CREATE TABLE "+insertPlainTable+" (LIKE fila_jobs INCLUDING DEFAULTS INCLUDING IDENTITY)"); err != nil {
		return res, err
	}
	var libs string
	if err := srv.admin.QueryRow(ctx, "SHOW shared_preload_libraries").Scan(&libs); err != nil {
		return res, fmt.Errorf("show shared_preload_libraries: %w", err)
	}
	res = bench.InsertCostResult{Server: name, Sessions: s.opts.InsertSessions, PLpgSQLPreloaded: preloads(libs, "plpgsql")}

	ways := []insertWay{
		{table: insertPlainTable, insert: sqlInsert(insertPlainTable)},
		{table: "fila_jobs", insert: sqlInsert("fila_jobs")},
		{table: "fila_jobs", insert: func(ctx context.Context, conn *pgx.Conn) error {
			_, err := runtime.Insert(ctx, conn, "bench", map[string]int{"a": 1}, nil)
			return err
		}},
	}
	cold, warm := make([][]float64, len(ways)), make([][]float64, len(ways))
	for i := range s.opts.InsertSessions {
		// Each way goes first in turn, so a stall of the machine falls on
		// every way alike.
		for k := range ways {
			w := (i + k) % len(ways)
			c, wm, err := ways[w].session(ctx, db.dsn)
			if err != nil {
				return res, err
			}
			cold[w], warm[w] = append(cold[w], ms(c)), append(warm[w], ms(wm))
			prog.Add(2)
		}
	}
	p50 := func(samples []float64) float64 { p, _, _, _, _ := report.Percentiles(samples); return p }
	res.PlainColdP50Ms, res.PlainWarmP50Ms = p50(cold[0]), p50(warm[0])
	res.FilaColdP50Ms, res.FilaWarmP50Ms = p50(cold[1]), p50(warm[1])
	res.InsertColdP50Ms, res.InsertWarmP50Ms = p50(cold[2]), p50(warm[2])
	return res, nil
}

// preloads reports whether a shared_preload_libraries value names lib.
func preloads(libs, lib string) bool {
	return slices.ContainsFunc(strings.Split(libs, ","), func(l string) bool {
		return strings.Trim(strings.TrimSpace(l), `"`) == lib
	})
}

// insertWay is one way of inserting a job in the insert scenario.
type insertWay struct {
	table  string
	insert func(ctx context.Context, conn *pgx.Conn) error
}

func sqlInsert(table string) func(ctx context.Context, conn *pgx.Conn) error {
	sql := fmt.Sprintf(insertStatement, pgx.Identifier{table}.Sanitize())
	return func(ctx context.Context, conn *pgx.Conn) error {
		var id int64
		return conn.QueryRow(ctx, sql, "bench", `{"a": 1}`).Scan(&id)
	}
}

// session opens a fresh session, times its first and second insert, and
// closes it. Connecting is not timed: it costs the same whichever the
// table.
func (w insertWay) session(ctx context.Context, dsn string) (cold, warm time.Duration, err error) {
	cfg, err := pgconfig.Conn(dsn)
	if err != nil {
		return 0, 0, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for i, d := range []*time.Duration{&cold, &warm} {
		start := time.Now()
		if err := w.insert(ctx, conn); err != nil {
			return 0, 0, fmt.Errorf("insert %d into %s: %w", i+1, w.table, err)
		}
		*d = time.Since(start)
	}
	return cold, warm, nil
}
