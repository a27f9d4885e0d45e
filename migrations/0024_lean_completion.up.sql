-- 0024: write the completions of a drain with a statement of their own.
--
-- fila_finish writes any outcome: a retry's backoff, an error appended to
-- the job's history, a snooze, an output, a unique key another job took
-- meanwhile. Almost every outcome of a busy worker is none of that: the
-- handler succeeded and recorded nothing. For a batch made only of those,
-- fila_complete locks the rows whose attempt is still the caller's
-- (skipping rows another transaction holds, as fila_finish does), marks
-- them completed, and returns which attempts it completed as three arrays
-- in one row rather than a row per job. Jobs with a unique key are left
-- to fila_finish, which checks the key's holder; so is every attempt this
-- statement did not complete (fenced, locked, deleted): the caller sends
-- those to fila_finish, which says what became of each.
CREATE FUNCTION fila_complete(p_ids bigint[], p_attempts int[], p_started timestamptz[])
RETURNS TABLE (ids bigint[], attempts int[], started timestamptz[])
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH locked AS MATERIALIZED (
        -- Locked by id alone, so the plan probes the primary key per
        -- attempt; the fence is checked on the locked row, whose newest
        -- version READ COMMITTED returns once it holds the lock, and every
        -- lock is taken before the first row is updated.
        SELECT j.id, j.state, j.attempts, j.started_at, j.unique_key, d.attempt, d.started
        FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
        JOIN fila_jobs j ON j.id = d.id
        FOR NO KEY UPDATE OF j SKIP LOCKED
    ), updated AS (
        UPDATE fila_jobs j
        SET state = 'completed', finished_at = now(), lease_until = NULL
        FROM locked l
        WHERE j.id = l.id
          AND l.state = 'running' AND l.attempts = l.attempt AND l.started_at = l.started
          AND l.unique_key IS NULL
        RETURNING j.id, j.attempts, j.started_at
    )
    SELECT coalesce(array_agg(u.id), '{}'), coalesce(array_agg(u.attempts), '{}'),
           coalesce(array_agg(u.started_at), '{}')
    FROM updated u;
END
$$;
