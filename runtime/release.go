package runtime

import (
	"context"
	"fmt"
)

// releaseSQL moves held jobs to pending, each under its row lock. The
// table's update trigger announces each queue's first released job at
// commit, as it does a retry, so idle workers claim them within
// milliseconds; a job whose RunAt is ahead keeps it and is picked up by the
// due timer. Rows: (id, state before, changed, due later at, and the three
// columns changeJobs reads for unique keys, always NULL here).
const releaseSQL = `WITH want AS (
    SELECT DISTINCT id FROM unnest($1::bigint[]) AS id
), changed AS (
    UPDATE fila_jobs j SET state = 'pending'
    WHERE j.id IN (SELECT id FROM want) AND j.state = 'held'
    RETURNING j.id, j.run_at
)
SELECT w.id, j.state, c.id IS NOT NULL, CASE WHEN c.run_at > now() THEN c.run_at END,
       NULL::text, NULL::bigint, NULL::text
FROM want w
LEFT JOIN fila_jobs j ON j.id = w.id
LEFT JOIN changed c ON c.id = w.id
ORDER BY w.id`

// Release lets held jobs (InsertOpts.Held) go: each becomes pending, due at
// its RunAt (now if it had none or it has passed), and its queue's workers
// are woken when db commits. db may be the caller's transaction. A job that
// does not exist or is not held is left alone and reported in Skipped,
// with the reason; ChangeResult.Err turns those into an error for a caller
// to whom any is a failure.
func Release(ctx context.Context, db DB, ids ...int64) (ChangeResult, error) {
	res, err := changeJobs(ctx, db, releaseSQL, ids, func(id int64, state string) string {
		if state == StateHeld {
			return fmt.Sprintf("job %d was held but changed meanwhile; look at it again", id)
		}
		return fmt.Sprintf("job %d is %s, not held: only held jobs are released", id, state)
	})
	if err != nil {
		return res, fmt.Errorf("release jobs: %w", err)
	}
	return res, nil
}

// Release lets held jobs go, as the package's Release does, on the
// Client's database.
func (c *Client) Release(ctx context.Context, ids ...int64) (ChangeResult, error) {
	return Release(ctx, c.db, ids...)
}

// ReleaseTx is Release inside the caller's transaction: the jobs are let go
// only if tx commits.
func (c *Client) ReleaseTx(ctx context.Context, tx DB, ids ...int64) (ChangeResult, error) {
	return Release(ctx, tx, ids...)
}

// CanRelease reports whether Release lets a job in state go: only held
// jobs.
func CanRelease(state string) bool { return state == StateHeld }
