package riverimport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/fila-run/fila/migrations"
	"github.com/fila-run/fila/runtime"
)

// ErrRunning is returned, wrapped, when River has running jobs and the
// import was not told to include them.
var ErrRunning = errors.New("River has running jobs")

// ErrNoRiverTable is returned, wrapped, when the River database has no
// river_job table where it was looked for.
var ErrNoRiverTable = errors.New("no river_job table")

// BadJobError is a River job that cannot move, and why.
type BadJobError struct {
	ID    int64
	Kind  string
	State string
	Err   error
}

func (e *BadJobError) Error() string {
	return fmt.Sprintf("River job %d (kind %q, %s) cannot move: %v", e.ID, e.Kind, e.State, e.Err)
}

func (e *BadJobError) Unwrap() error { return e.Err }

// Import moves River's jobs into the Fila database fila, as cfg says. Each
// batch commits on its own: after an error, the batches before it have
// moved, and running Import again moves the rest.
func Import(ctx context.Context, fila *pgxpool.Pool, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	im := &importer{cfg: cfg, fila: fila, river: cfg.River, log: cfg.Logger.Named("riverimport")}
	if im.river == nil {
		im.river, im.same = fila, true
	}
	return im.run(ctx)
}

type importer struct {
	cfg         Config
	fila, river *pgxpool.Pool
	same        bool   // River's tables are in the Fila database
	table       string // river_job's name in SQL
	name        string // and in messages
	limits      runtime.PayloadLimits
	log         *zap.Logger
}

// table is river_job's name in SQL.
func riverTable(schema string) pgx.Identifier {
	if schema == "" {
		return pgx.Identifier{"river_job"}
	}
	return pgx.Identifier{schema, "river_job"}
}

func (im *importer) run(ctx context.Context) (*Report, error) {
	if err := im.check(ctx); err != nil {
		return nil, err
	}
	byState, err := im.countStates(ctx)
	if err != nil {
		return nil, err
	}
	if n := byState[stateRunning]; n > 0 && !im.cfg.IncludeRunning {
		return nil, fmt.Errorf("%w: %d in %s. Stop every River worker first (Client.Stop), then import them as retryable with --include-running (IncludeRunning)",
			ErrRunning, n, im.name)
	}
	states := []string{stateAvailable, stateScheduled, stateRetryable}
	if im.cfg.IncludeRunning {
		states = append(states, stateRunning)
	}
	if im.cfg.IncludeFinished {
		states = append(states, stateCompleted, stateCancelled, stateDiscarded)
	}
	rep := &Report{DryRun: im.cfg.DryRun}
	for _, s := range slices.Sorted(mapKeys(byState)) {
		if !slices.Contains(states, s) {
			rep.Left = append(rep.Left, Left{State: s, Jobs: byState[s], Reason: leftReason(s)})
		}
	}
	var total int64
	for _, s := range states {
		total += byState[s]
	}
	im.log.Info("import starting", zap.String("river_table", im.name), zap.Strings("states", states),
		zap.Int64("river_jobs", total), zap.Int("batch_size", im.cfg.BatchSize), zap.Bool("dry_run", im.cfg.DryRun))

	moved := tally{}
	start := time.Now()
	var after, seen int64
	for {
		n, last, err := im.batch(ctx, after, states, moved, rep)
		if err != nil {
			return rep, err
		}
		if n == 0 {
			break
		}
		after = last
		seen += int64(n)
		rep.Batches++
		rep.Moved = moved.counts()
		secs := time.Since(start).Seconds()
		im.log.Info("batch imported", zap.Int("batch", rep.Batches), zap.Int("jobs", n), zap.Int64("river_id_through", last),
			zap.Int64("done", seen), zap.Int64("of", total), zap.Int64("moved", rep.MovedTotal()),
			zap.Int64("already_imported", rep.AlreadyImported), zap.Float64("jobs_per_s", float64(seen)/max(secs, 1e-9)),
			zap.Bool("dry_run", im.cfg.DryRun))
	}
	rep.Moved = moved.counts()
	im.log.Info("import finished", zap.Int64("moved", rep.MovedTotal()), zap.Int64("already_imported", rep.AlreadyImported),
		zap.Int64("deleted", rep.Deleted), zap.Int("batches", rep.Batches), zap.Duration("took", time.Since(start)),
		zap.Bool("dry_run", im.cfg.DryRun))
	return rep, nil
}

// check finds River's table and Fila's schema, and reads the payload limits
// the table holds, before anything moves.
func (im *importer) check(ctx context.Context) error {
	id := riverTable(im.cfg.Schema)
	im.table = id.Sanitize()
	im.name = strings.Join(id, ".")
	var exists bool
	if err := im.river.QueryRow(ctx, tableSQL, im.table).Scan(&exists); err != nil {
		return fmt.Errorf("look for River's table %s: %w", im.name, err)
	}
	if !exists {
		where := "the connection's search_path"
		if im.cfg.Schema != "" {
			where = "schema " + im.cfg.Schema
		}
		return fmt.Errorf("%w in %s of database %s: is River migrated there? Name its schema with --river-schema, its database with --from",
			ErrNoRiverTable, where, im.river.Config().ConnConfig.Database)
	}
	v, err := migrations.Version(ctx, im.fila)
	if err != nil {
		return fmt.Errorf("read Fila's schema version: %w", err)
	}
	if v != migrations.Latest() {
		return fmt.Errorf("the Fila database is at migration version %d, this fila needs %d: run `fila migrate` first", v, migrations.Latest())
	}
	limits, _, err := runtime.TablePayloadLimits(ctx, im.fila)
	if err != nil {
		return fmt.Errorf("read fila_jobs' payload limits: %w", err)
	}
	im.limits = limits.WithDefaults()
	return nil
}

func (im *importer) countStates(ctx context.Context) (map[string]int64, error) {
	rows, err := im.river.Query(ctx, fmt.Sprintf(countSQL, im.table))
	if err != nil {
		return nil, fmt.Errorf("count River's jobs: %w", err)
	}
	byState := map[string]int64{}
	var s string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&s, &n}, func() error { byState[s] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("count River's jobs: %w", err)
	}
	return byState, nil
}

// CountByKind counts River's jobs by state and kind, whatever their state:
// what a dry run's report sets beside what would move.
func CountByKind(ctx context.Context, river *pgxpool.Pool, schema string) ([]Count, error) {
	rows, err := river.Query(ctx, fmt.Sprintf(countByKindSQL, riverTable(schema).Sanitize()))
	if err != nil {
		return nil, fmt.Errorf("count River's jobs: %w", err)
	}
	var out []Count
	var c Count
	_, err = pgx.ForEachRow(rows, []any{&c.State, &c.Kind, &c.Jobs}, func() error {
		c.To = filaState(c.State)
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count River's jobs: %w", err)
	}
	return out, nil
}

func leftReason(state string) string {
	switch state {
	case stateCompleted, stateCancelled, stateDiscarded:
		return "finished: moved only with --include-finished"
	case statePending:
		return "pending in River (waiting for what only River Pro releases, such as a workflow's dependencies): not moved"
	}
	return "not moved"
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// batch moves the River jobs after River id `after`, at most one batch, in
// one transaction of the Fila database. It returns how many River jobs it
// read and the last one's id.
func (im *importer) batch(ctx context.Context, after int64, states []string, moved tally, rep *Report) (int, int64, error) {
	opts := pgx.TxOptions{}
	if im.cfg.DryRun {
		opts.AccessMode = pgx.ReadOnly
	}
	tx, err := im.fila.BeginTx(ctx, opts)
	if err != nil {
		return 0, 0, fmt.Errorf("begin a batch: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if !im.cfg.DryRun {
		if _, err := tx.Exec(ctx, lockSQL); err != nil {
			return 0, 0, fmt.Errorf("wait for another import: %w", err)
		}
	}
	var river interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	} = im.river
	if im.same {
		river = tx
	}
	jobs, err := readBatch(ctx, river, fmt.Sprintf(batchSQL, im.table), after, states, im.cfg.BatchSize)
	if err != nil {
		return 0, 0, err
	}
	if len(jobs) == 0 {
		return 0, 0, nil
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.id
	}
	imported, err := importedIDs(ctx, tx, ids)
	if err != nil {
		return 0, 0, err
	}
	var now time.Time
	if err := tx.QueryRow(ctx, nowSQL).Scan(&now); err != nil {
		return 0, 0, fmt.Errorf("read the database clock: %w", err)
	}
	rows := make([]filaJob, 0, len(jobs))
	for _, j := range jobs {
		if imported[j.id] {
			rep.AlreadyImported++
			continue
		}
		f, err := mapJob(j, im.limits, now)
		if err != nil {
			return 0, 0, &BadJobError{ID: j.id, Kind: j.kind, State: j.state, Err: err}
		}
		rows = append(rows, f)
	}
	last := jobs[len(jobs)-1].id
	if im.cfg.DryRun {
		for _, f := range rows {
			moved.add(stateOf(jobs, f.riverID), f.kind, f.state)
		}
		return len(jobs), last, nil
	}
	if err := insert(ctx, tx, rows); err != nil {
		return 0, 0, fmt.Errorf("insert River jobs %d to %d: %w", jobs[0].id, last, err)
	}
	if im.cfg.Delete && im.same {
		tag, err := tx.Exec(ctx, fmt.Sprintf(deleteSQL, im.table), ids)
		if err != nil {
			return 0, 0, fmt.Errorf("delete River jobs %d to %d: %w", jobs[0].id, last, err)
		}
		rep.Deleted += tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("commit River jobs %d to %d: %w", jobs[0].id, last, err)
	}
	for _, f := range rows {
		moved.add(stateOf(jobs, f.riverID), f.kind, f.state)
	}
	if im.cfg.Delete && !im.same {
		// Another database: after the commit. Should this fail, the jobs
		// are in Fila already, and the next run finds them imported and
		// deletes them then.
		tag, err := im.river.Exec(ctx, fmt.Sprintf(deleteSQL, im.table), ids)
		if err != nil {
			return 0, 0, fmt.Errorf("delete River jobs %d to %d (moved to Fila already; run the import again to delete them): %w", jobs[0].id, last, err)
		}
		rep.Deleted += tag.RowsAffected()
	}
	return len(jobs), last, nil
}

// stateOf is the River state of the job of that id in the batch.
func stateOf(jobs []riverJob, id int64) string {
	i, ok := slices.BinarySearchFunc(jobs, id, func(j riverJob, id int64) int {
		switch {
		case j.id < id:
			return -1
		case j.id > id:
			return 1
		}
		return 0
	})
	if !ok {
		return ""
	}
	return jobs[i].state
}

func readBatch(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, after int64, states []string, limit int) ([]riverJob, error) {
	rows, err := q.Query(ctx, sql, after, states, limit)
	if err != nil {
		return nil, fmt.Errorf("read River's jobs after id %d: %w", after, err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (riverJob, error) {
		var j riverJob
		var attempt, maxAttempts int16
		err := r.Scan(&j.id, &j.state, &attempt, &maxAttempts, &j.attemptedAt, &j.createdAt, &j.finalizedAt, &j.scheduledAt,
			&j.priority, &j.args, &j.errors, &j.kind, &j.metadata, &j.queue, &j.tags)
		j.attempt, j.maxAttempts = int(attempt), int(maxAttempts)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("read River's jobs after id %d: %w", after, err)
	}
	return jobs, nil
}

func importedIDs(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]bool, error) {
	rows, err := tx.Query(ctx, importedSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("find the River jobs imported already: %w", err)
	}
	found := map[int64]bool{}
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { found[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("find the River jobs imported already: %w", err)
	}
	return found, nil
}

func insert(ctx context.Context, tx pgx.Tx, rows []filaJob) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	queues, kinds, payloads, states := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios := make([]int16, n)
	runAts, createds := make([]*time.Time, n), make([]time.Time, n)
	starteds, finisheds := make([]*time.Time, n), make([]*time.Time, n)
	attempts, maxes := make([]int32, n), make([]int32, n)
	lastErrs, tags := make([]*string, n), make([]*string, n)
	errs, metadata := make([]string, n), make([]string, n)
	riverIDs := make([]int64, n)
	for i, r := range rows {
		riverIDs[i] = r.riverID
		queues[i], kinds[i], payloads[i], states[i] = r.queue, r.kind, r.payload, r.state
		prios[i], runAts[i], createds[i], starteds[i], finisheds[i] = r.priority, r.runAt, r.createdAt, r.startedAt, r.finishedAt
		attempts[i], maxes[i], lastErrs[i], tags[i], errs[i], metadata[i] = r.attempts, r.maxAttempts, r.lastError, r.tags, r.errors, r.metadata
	}
	tag, err := tx.Exec(ctx, insertSQL, queues, kinds, payloads, prios, states, runAts, attempts, maxes,
		lastErrs, createds, starteds, finisheds, errs, tags, metadata, riverIDs)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("inserted %d rows of %d: the others were recorded as moved meanwhile", tag.RowsAffected(), n)
	}
	return nil
}
