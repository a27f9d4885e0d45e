-- 0016 down: fila_finish as 0014 left it, without outputs.

DROP FUNCTION fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[], bool[], text[]);
ALTER TABLE fila_jobs DROP COLUMN output;

CREATE OR REPLACE FUNCTION fila_finish(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_ok bool[],
                                       p_errs text[], p_delay_ms float8[], p_permanent bool[])
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
                   d.attempt, d.started, d.ok, d.err, d.delay_ms, d.permanent,
                   CASE WHEN d.ok THEN 'completed'
                        WHEN d.permanent OR j.attempts >= j.max_attempts THEN 'dead'
                        ELSE 'pending' END AS target
            FROM unnest(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent)
                 AS d(id, attempt, started, ok, err, delay_ms, permanent)
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
            unique_key  = CASE WHEN m.holder IS NOT NULL AND m.target <> 'pending' THEN NULL ELSE j.unique_key END,
            last_error  = CASE WHEN m.ok AND m.holder IS NULL THEN j.last_error
                               WHEN m.ok THEN fila_unique_note(j.unique_key, m.holder, m.target)
                               ELSE m.err || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), '') END,
            errors      = CASE WHEN m.ok AND m.holder IS NULL THEN j.errors
                               ELSE fila_append_error(j.errors, j.attempts,
                                    CASE WHEN m.ok THEN '' ELSE m.err END
                                    || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), '')) END
        FROM planned m
        WHERE j.id = m.id
          AND m.state = 'running' AND m.attempts = m.attempt AND m.started_at = m.started
        RETURNING j.id, j.attempts, j.started_at, j.state,
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
