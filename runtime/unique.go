package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Unique jobs: fila_jobs_unique_idx makes (kind, unique_key) unique among
// the rows whose state is in their unique_states (by default pending and
// running), so a duplicate is refused however it is inserted.
const (
	// insertJobSQL inserts one job, or nothing when it duplicates one; the
	// duplicate's id is then looked up by lookupUniqueSQL.
	insertJobSQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, run_at, max_attempts, unique_key, unique_states, tags, metadata,
                       policy)
VALUES ($1::text, $2::text, $3::text::jsonb, $4::smallint, coalesce($5::timestamptz, now()), $6::int, $7::text, $8::text[],
        string_to_array($9::text, E'\x1f'), $10::text::jsonb, $11::text::jsonb)
ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL AND state = ANY (coalesce(unique_states, '{pending,running}'::text[]))
DO NOTHING
RETURNING id`

	lookupUniqueSQL = `SELECT id, state FROM fila_jobs
WHERE kind = $1::text AND unique_key = $2::text AND state = ANY (coalesce(unique_states, '{pending,running}'::text[]))
LIMIT 1`
)

// uniqueStatesDefault are the states during which a UniqueKey holds unless
// the job says otherwise.
var uniqueStatesDefault = []string{StatePending, StateRunning}

// prepareUnique checks and copies a job's uniqueness settings.
func prepareUnique(r *insertRow, o InsertOpts) error {
	if o.UniqueKey == "" {
		if len(o.UniqueStates) > 0 {
			return errors.New("UniqueStates is set without a UniqueKey")
		}
		return nil
	}
	key := o.UniqueKey
	r.uniqueKey = &key
	for _, st := range o.UniqueStates {
		if !slices.Contains(JobStates(), st) || st == StateWaiting || st == StateHeld {
			return fmt.Errorf("UniqueStates: %q is not a job state (states: %v)", st, JobStates())
		}
	}
	if len(o.UniqueStates) > 0 && !slices.Contains(o.UniqueStates, StatePending) {
		// The new job itself is pending: unique while pending or not at all.
		return fmt.Errorf("UniqueStates %v must include pending, the state a new job starts in", o.UniqueStates)
	}
	if len(o.UniqueStates) > 0 && !slices.Equal(o.UniqueStates, uniqueStatesDefault) {
		r.uniqueStates = slices.Clone(o.UniqueStates)
	}
	return nil
}

// Inserted is what InsertJob did.
type Inserted struct {
	// ID is the new job's, or the existing job's when Duplicate.
	ID int64
	// Duplicate says a job with the same kind and UniqueKey exists in one of
	// its UniqueStates, so nothing was inserted.
	Duplicate bool
	// DuplicateState is the existing job's state when Duplicate.
	DuplicateState string
}

// InsertJob enqueues one job like Insert and says whether it was a
// duplicate of an existing unique job (see InsertOpts.UniqueKey).
func InsertJob(ctx context.Context, db DB, kind string, payload any, opts *InsertOpts) (Inserted, error) {
	p := InsertParams{Kind: kind, Payload: payload}
	if opts != nil {
		p.InsertOpts = *opts
	}
	r, err := prepare(p)
	if err != nil {
		return Inserted{}, fmt.Errorf("insert: %w", err)
	}
	res, err := insertOne(ctx, db, r)
	if err != nil {
		return res, fmt.Errorf("insert job of kind %q: %w", kind, payloadLimitError(err))
	}
	return res, nil
}

// insertOne inserts one prepared job.
func insertOne(ctx context.Context, db DB, r insertRow) (Inserted, error) {
	if r.hasFlow() {
		ids, err := insertFlowRows(ctx, db, []insertRow{r}, nil)
		if err != nil {
			return Inserted{}, err
		}
		return Inserted{ID: ids[0]}, nil
	}
	if r.uniqueKey == nil {
		var id int64
		err := db.QueryRow(ctx, insertSQL, r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts, r.tagList(), r.metadata, r.state(), r.policy).Scan(&id)
		return Inserted{ID: id}, err
	}
	// The duplicate may have been committed by another transaction after
	// this statement's snapshot, or have left its unique states just now:
	// look again, and insert again, a few times.
	for range 3 {
		var res Inserted
		err := db.QueryRow(ctx, insertJobSQL, r.queue, r.kind, r.payload, r.priority, r.runAt, r.maxAttempts,
			r.uniqueKey, r.uniqueStates, r.tags, r.metadata, r.policy).Scan(&res.ID)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return res, err
		}
		err = db.QueryRow(ctx, lookupUniqueSQL, r.kind, *r.uniqueKey).Scan(&res.ID, &res.DuplicateState)
		if err == nil {
			res.Duplicate = true
			return res, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return res, err
		}
	}
	return Inserted{}, fmt.Errorf("unique key %q: the existing job kept changing state; try again", *r.uniqueKey)
}

// beginner is what can open a transaction: a pool, a connection, or a
// transaction (a savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// insertEach inserts jobs one statement each, in order, all or nothing:
// InsertMany's path when some job has a UniqueKey, whose duplicate returns
// the existing job's id.
func insertEach(ctx context.Context, db DB, rows []insertRow) ([]int64, error) {
	do := func(q DB) ([]int64, error) {
		ids := make([]int64, len(rows))
		for i, r := range rows {
			res, err := insertOne(ctx, q, r)
			if err != nil {
				return nil, fmt.Errorf("insert many: job %d: %w", i, err)
			}
			ids[i] = res.ID
		}
		return ids, nil
	}
	var ids []int64
	ok, err := transact(ctx, db, func(tx DB) error {
		var err error
		ids, err = do(tx)
		return err
	})
	if !ok {
		return do(db)
	}
	return ids, err
}

// txBeginner is what can open a transaction with options: a pool or a
// connection.
type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// readCommitted is the isolation of Fila's own transactions, set whatever
// the database's default: each statement must see what committed before
// it, and a REPEATABLE READ or SERIALIZABLE default would turn a
// concurrent worker's change into a serialization failure.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// tagList is the job's tags as a list, nil for none.
func (r insertRow) tagList() []string {
	if r.tags == nil {
		return nil
	}
	return strings.Split(*r.tags, "\x1f")
}
