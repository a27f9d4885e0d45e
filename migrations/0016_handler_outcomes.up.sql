-- 0016: a handler can snooze its job, and leave an output.
--
-- Snooze: a handler that says "not now, in d" (runtime.Snooze) puts its
-- job back to pending, due in d, and gives its attempt back: a job that
-- waits for something outside it does not use up max_attempts by asking.
-- A failure with a retry time of the handler's choosing (RetryAfter, an
-- upstream's Retry-After) needs nothing new: it is a failed attempt whose
-- delay the handler set.
--
-- Output: a handler may record a small JSON value (Job.SetOutput) stored
-- with the job's completion, in the new column output, for operators
-- (fila jobs show, the dashboard) and for the jobs that follow it. It is
-- bounded by fila_jobs_output_size (64 KiB of JSON text), which the Go API
-- checks first.
--
-- fila_finish takes the two new arrays. The old signature stays, as a
-- wrapper, for workers of the previous build during a rolling upgrade.

ALTER TABLE fila_jobs ADD COLUMN output jsonb,
    ADD CONSTRAINT fila_jobs_output_size CHECK (output IS NULL OR octet_length(output::text) <= 65536);

CREATE FUNCTION fila_finish(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_ok bool[],
                            p_errs text[], p_delay_ms float8[], p_permanent bool[],
                            p_snooze bool[], p_outputs text[])
RETURNS TABLE (id bigint, attempt int, started_at timestamptz, state text, due_ms float8)
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH locked AS (
        -- The fence is checked on the locked row, which nothing else can
        -- change until this statement commits. The sort takes every lock
        -- before the first row is updated: a job listed twice (two attempts
        -- of it) must not find its row already updated by this statement,
        -- which would drop it from the result.
        SELECT * FROM (
            SELECT j.id, j.state, j.attempts, j.started_at, j.kind, j.unique_key, j.unique_states,
                   d.attempt, d.started, d.ok, d.err, d.delay_ms, d.permanent, d.snooze, d.output,
                   CASE WHEN d.ok THEN 'completed'
                        WHEN d.snooze THEN 'pending'
                        WHEN d.permanent OR j.attempts >= j.max_attempts THEN 'dead'
                        ELSE 'pending' END AS target
            FROM unnest(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent, p_snooze, p_outputs)
                 AS d(id, attempt, started, ok, err, delay_ms, permanent, snooze, output)
            JOIN fila_jobs j ON j.id = d.id
            FOR NO KEY UPDATE OF j SKIP LOCKED) x
        ORDER BY x.id
    ), planned AS (
        -- A retry whose unique key another job took meanwhile (one enqueued
        -- while this one ran, its key not held while running) is not
        -- retried: that job runs instead, and this one is cancelled. An
        -- outcome that ends the job keeps its state and lets the key go.
        -- Jobs without a key pay for none of this.
        SELECT m.*, CASE WHEN m.unique_key IS NOT NULL AND m.state = 'running'
                         THEN fila_unique_holder(m.id, m.kind, m.unique_key, m.unique_states, 'running', m.target) END AS holder
        FROM locked m
    ), updated AS (
        UPDATE fila_jobs j
        SET state = CASE WHEN m.holder IS NOT NULL AND m.target = 'pending' THEN 'cancelled' ELSE m.target END,
            run_at = CASE
                WHEN m.target = 'pending' AND m.holder IS NULL
                THEN now() + make_interval(secs => m.delay_ms / 1000)
                ELSE j.run_at END,
            finished_at = CASE WHEN m.target <> 'pending' OR m.holder IS NOT NULL THEN now() END,
            lease_until = NULL,
            -- A snoozed attempt is given back: the job runs again later
            -- without having spent one.
            attempts    = CASE WHEN m.snooze THEN j.attempts - 1 ELSE j.attempts END,
            output      = CASE WHEN m.ok AND m.output IS NOT NULL THEN m.output::jsonb ELSE j.output END,
            unique_key  = CASE WHEN m.holder IS NOT NULL AND m.target <> 'pending' THEN NULL ELSE j.unique_key END,
            last_error  = CASE WHEN (m.ok OR m.snooze) AND m.holder IS NULL THEN j.last_error
                               WHEN m.ok OR m.snooze THEN fila_unique_note(j.unique_key, m.holder, m.target)
                               ELSE m.err || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), '') END,
            errors      = CASE WHEN (m.ok OR m.snooze) AND m.holder IS NULL THEN j.errors
                               ELSE fila_append_error(j.errors, j.attempts,
                                    CASE WHEN m.ok OR m.snooze THEN '' ELSE m.err END
                                    || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), '')) END
        FROM planned m
        WHERE j.id = m.id
          AND m.state = 'running' AND m.attempts = m.attempt AND m.started_at = m.started
        RETURNING j.id, m.attempt, j.started_at, j.state,
                  CASE WHEN j.state = 'pending' THEN (extract(epoch FROM j.run_at - now()) * 1000)::float8 END
    )
    SELECT u.id, u.attempts, u.started_at, u.state, coalesce(u.due_ms, 0)::float8
    FROM updated AS u(id, attempts, started_at, state, due_ms)
    UNION ALL
    SELECT l.id, l.attempt, l.started, 'fenced', 0::float8
    FROM locked l
    WHERE NOT (l.state = 'running' AND l.attempts = l.attempt AND l.started_at = l.started);
END
$$;

CREATE OR REPLACE FUNCTION fila_finish(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_ok bool[],
                                       p_errs text[], p_delay_ms float8[], p_permanent bool[])
RETURNS TABLE (id bigint, attempt int, started_at timestamptz, state text, due_ms float8)
LANGUAGE sql AS $$
    SELECT * FROM fila_finish(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent,
                              array_fill(false, ARRAY[cardinality(p_ids)]),
                              array_fill(NULL::text, ARRAY[cardinality(p_ids)]))
$$;
