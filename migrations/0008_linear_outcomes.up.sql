-- 0008: outcome statements whose work grows with the batch, not its square.
--
-- fila_finish, fila_heartbeat and fila_release unnested their arrays into a
-- CTE and joined it to another CTE (the locked rows, then the updated ones).
-- A CTE has no index, and the planner, which cannot see an array
-- parameter's length, estimates ten elements: once PL/pgSQL switched to the
-- generic plan (after five calls), those joins became nested loops that
-- compared every outcome with every other. A finish of 886 outcomes took
-- 239 ms, 223 ms of it in one join filter that removed 784 110 rows
-- (auto_explain during fila bench --scenarios drain), so the drain ran at
-- about 8 000 jobs/s while the same updates by hand take under 10 ms.
--
-- Now each function reads the table once per outcome through the primary
-- key, keeping the outcome's fields beside the row it locked, and no result
-- is joined back to the input: rows updated and rows found fenced are
-- listed separately (UNION ALL). An outcome absent from the result had its
-- row locked by another statement for a moment, or its job no longer
-- exists (deleted by hand while it ran); the caller tells the two apart
-- with one more lookup of those few ids only, so that the usual finish
-- does not probe every row twice.
--
-- Every plan is now a nested loop over the input with an index probe per
-- element, the best plan for any length, so it is planned once per
-- connection (force_generic_plan) as the claim is (0006), and the planner
-- is held to it (no sequential scan, hash or merge join): planned on a new,
-- empty table it chose a sequential scan of fila_jobs hashed against the
-- input, which a connection would keep until the table is next analyzed.
-- A finish of 1 000 outcomes then takes about 12 ms on an idle server, and
-- the drain runs about 2.5 times as fast (fila bench --scenarios drain).

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
            SELECT j.id, j.state, j.attempts, j.started_at,
                   d.attempt, d.started, d.ok, d.err, d.delay_ms, d.permanent
            FROM unnest(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent)
                 AS d(id, attempt, started, ok, err, delay_ms, permanent)
            JOIN fila_jobs j ON j.id = d.id
            FOR UPDATE OF j SKIP LOCKED) x
        ORDER BY x.id
    ), updated AS (
        UPDATE fila_jobs j
        SET state = CASE
                WHEN m.ok THEN 'completed'
                WHEN m.permanent OR j.attempts >= j.max_attempts THEN 'dead'
                ELSE 'pending' END,
            run_at = CASE
                WHEN NOT m.ok AND NOT m.permanent AND j.attempts < j.max_attempts
                THEN now() + make_interval(secs => m.delay_ms / 1000)
                ELSE j.run_at END,
            finished_at = CASE
                WHEN m.ok OR m.permanent OR j.attempts >= j.max_attempts THEN now() END,
            lease_until = NULL,
            last_error  = CASE WHEN m.ok THEN j.last_error ELSE m.err END,
            errors      = CASE WHEN m.ok THEN j.errors ELSE fila_append_error(j.errors, j.attempts, m.err) END
        FROM locked m
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

CREATE OR REPLACE FUNCTION fila_heartbeat(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_lease_ms float8)
RETURNS TABLE (id bigint, attempt int, started_at timestamptz, status text)
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH locked AS (
        SELECT * FROM (
            SELECT j.id, j.state, j.attempts, j.started_at, d.attempt, d.started
            FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
            JOIN fila_jobs j ON j.id = d.id
            FOR UPDATE OF j SKIP LOCKED) x
        ORDER BY x.id -- every lock before the first update, as in fila_finish
    ), updated AS (
        UPDATE fila_jobs j
        SET lease_until = now() + make_interval(secs => p_lease_ms / 1000)
        FROM locked m
        WHERE j.id = m.id
          AND m.state = 'running' AND m.attempts = m.attempt AND m.started_at = m.started
        RETURNING j.id, j.attempts, j.started_at
    )
    SELECT u.id, u.attempts, u.started_at, 'kept'
    FROM updated AS u(id, attempts, started_at)
    UNION ALL
    SELECT l.id, l.attempt, l.started,
           CASE WHEN l.state = 'cancelled' AND l.attempts = l.attempt AND l.started_at = l.started
                THEN 'cancelled' ELSE 'lost' END
    FROM locked l
    WHERE NOT (l.state = 'running' AND l.attempts = l.attempt AND l.started_at = l.started);
END
$$;

CREATE OR REPLACE FUNCTION fila_release(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_reason text)
RETURNS int
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    v_n int;
BEGIN
    WITH locked AS (
        SELECT * FROM (
            SELECT j.id, j.state, j.attempts, j.started_at, d.attempt, d.started
            FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
            JOIN fila_jobs j ON j.id = d.id
            FOR UPDATE OF j) x
        ORDER BY x.id -- every lock before the first update, as in fila_finish
    )
    UPDATE fila_jobs j
    SET state       = 'pending',
        attempts    = j.attempts - 1,
        run_at      = now(),
        lease_until = NULL,
        errors      = fila_append_error(j.errors, j.attempts, p_reason || ' (not counted as an attempt)')
    FROM locked m
    WHERE j.id = m.id
      AND m.state = 'running' AND m.attempts = m.attempt AND m.started_at = m.started;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
