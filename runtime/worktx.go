package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/claimer"
)

// WorkResult is what WorkTx did with one attempt.
type WorkResult struct {
	// Err is what the handler (and its middleware) returned; nil on success.
	Err error
	// Outcome is how the attempt ended: OutcomeCompleted, OutcomeRetried,
	// OutcomeDead or OutcomeSnoozed.
	Outcome Outcome
	// Job is the job's row once the outcome is written, output included.
	Job *JobRow
}

// workTxJobSQL reads what WorkTx checks before it claims.
const workTxJobSQL = `SELECT queue, kind, state FROM fila_jobs WHERE id = $1::bigint`

// workTxLease is the lease WorkTx claims with: the row stays locked by tx
// while the handler runs, so no worker can rescue it however long it takes.
const workTxLease = time.Hour

// WorkTx runs one attempt of the pending job id synchronously inside tx, as
// a worker would, and writes its outcome in tx: it claims the job (which
// must be due and of kind's kind), runs kind's handler wrapped in
// middleware (the first outermost) with the job's timeout or kind's, and
// records the result as the runtime does: completed with its output,
// pending again after its backoff (the job's, the kind's, or the
// runtime's default), dead, or snoozed without spending the attempt. The
// handler may complete the job itself with CompleteTx(ctx, tx, job).
// Nothing is committed: tx is the caller's.
//
// It is for tests (package filatest builds on it) and for tools that run
// one job inline; workers never need it. Unlike a worker's, the attempt has
// no heartbeats, and an operator's cancel waits for tx.
func WorkTx(ctx context.Context, tx pgx.Tx, kind Kind, middleware []Middleware, id int64) (WorkResult, error) {
	if kind.Handler == nil {
		return WorkResult{}, fmt.Errorf("work job %d: kind %q has no Handler", id, kind.Name)
	}
	kind.Handler = recovering(kind.Handler)
	for i := len(middleware) - 1; i >= 0; i-- {
		kind.Handler = middleware[i](kind.Handler)
	}
	var queue, kindName, state string
	err := tx.QueryRow(ctx, workTxJobSQL, id).Scan(&queue, &kindName, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return WorkResult{}, fmt.Errorf("work job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return WorkResult{}, fmt.Errorf("work job %d: %w", id, err)
	}
	if kindName != kind.Name {
		return WorkResult{}, fmt.Errorf("work job %d: it is of kind %q, not %q", id, kindName, kind.Name)
	}
	store := claimer.New(tx)
	cj, err := store.ClaimID(ctx, id, queue, []string{kind.Name}, workTxLease)
	if err != nil {
		return WorkResult{}, fmt.Errorf("work job %d: %w", id, err)
	}
	if cj == nil {
		return WorkResult{}, fmt.Errorf("work job %d: it is %s, not pending and due now (or its queue %q is paused)", id, state, queue)
	}
	job := newJob(cj)
	job.setOwnedUntil(time.Now().Add(workTxLease * 5 / 6))
	actx, cancel := context.WithCancelCause(ctx)
	herr := runKind(actx, kind, job)
	cause := context.Cause(actx)
	cancel(nil)
	res := mapResult(job, herr, cause, kind.Backoff, RetryPolicy{Base: RetryBaseDefault, Max: RetryMaxDefault})
	out := WorkResult{Err: herr, Outcome: handlerOutcome(job, herr, cause)}
	o := claimer.Outcome{Attempt: job.attempt()}
	switch res.kind {
	case resultCompletedInTx:
	case resultOK:
		o.OK, o.Output = true, job.output
	case resultSnoozed:
		o.Snooze, o.Delay = true, res.delay
	case resultFailed:
		o.Err, o.Permanent, o.Delay = res.err.Error(), res.permanent, res.delay
	default:
		return out, fmt.Errorf("work job %d: the attempt was interrupted: %w", id, herr)
	}
	if res.kind != resultCompletedInTx {
		fin, err := store.Finish(ctx, []claimer.Outcome{o})
		if err != nil {
			return out, fmt.Errorf("work job %d: %w", id, err)
		}
		if len(fin) != 1 || fin[0].State == claimer.StateFenced || fin[0].State == claimer.StateSkipped {
			return out, fmt.Errorf("work job %d: its outcome could not be written: %w", id, ErrNotOwner)
		}
	}
	if out.Job, err = GetJob(ctx, tx, id); err != nil {
		return out, fmt.Errorf("work job %d: %w", id, err)
	}
	return out, nil
}
