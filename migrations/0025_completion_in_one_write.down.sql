-- 0025 down: every batch locked, then updated, as in 0024.

CREATE OR REPLACE FUNCTION fila_complete(p_ids bigint[], p_attempts int[], p_started timestamptz[])
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
