-- 0008 down: the outcome functions as 0002 created them, with 0006's settings.

CREATE OR REPLACE FUNCTION fila_finish(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_ok bool[],
                            p_errs text[], p_delay_ms float8[], p_permanent bool[])
RETURNS TABLE (id bigint, attempt int, started_at timestamptz, state text, due_ms float8)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH d AS (
        SELECT * FROM unnest(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent)
                      AS d(id, attempt, started, ok, err, delay_ms, permanent)
    ), locked AS (
        -- Every row is reached by its primary key, and the fence is checked
        -- on the locked row, which nothing else can change until this
        -- statement commits. A state = 'running' condition on fila_jobs here
        -- would let the planner, whose estimate of running rows is often
        -- stale (a table analyzed while its backlog was pending), join
        -- through the running-lease index: every running row, and the dead
        -- entries of recent ones, read once per outcome.
        SELECT j.id, j.state, j.attempts, j.started_at FROM fila_jobs j
        WHERE j.id = ANY (p_ids)
        FOR UPDATE SKIP LOCKED
    ), mine AS (
        SELECT d.* FROM d JOIN locked l
            ON l.id = d.id AND l.state = 'running' AND l.attempts = d.attempt AND l.started_at = d.started
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
        FROM mine m
        WHERE j.id = m.id
        RETURNING j.id, j.attempts, j.started_at, j.state,
                  CASE WHEN j.state = 'pending' THEN (extract(epoch FROM j.run_at - now()) * 1000)::float8 END AS due_ms
    )
    SELECT d.id, d.attempt, d.started,
           coalesce(u.state, CASE WHEN l.id IS NULL THEN 'skipped' ELSE 'fenced' END),
           coalesce(u.due_ms, 0)::float8
    FROM d
    LEFT JOIN updated u ON u.id = d.id AND u.attempts = d.attempt AND u.started_at = d.started
    LEFT JOIN locked l ON l.id = d.id;
END
$$;

CREATE OR REPLACE FUNCTION fila_heartbeat(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_lease_ms float8)
RETURNS TABLE (id bigint, attempt int, started_at timestamptz, status text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH d AS (
        SELECT * FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
    ), locked AS (
        SELECT j.id, j.state, j.attempts, j.started_at FROM fila_jobs j
        WHERE j.id = ANY (p_ids) FOR UPDATE SKIP LOCKED
    ), mine AS (
        SELECT d.* FROM d JOIN locked l
            ON l.id = d.id AND l.state = 'running' AND l.attempts = d.attempt AND l.started_at = d.started
    ), updated AS (
        UPDATE fila_jobs j
        SET lease_until = now() + make_interval(secs => p_lease_ms / 1000)
        FROM mine m
        WHERE j.id = m.id
        RETURNING j.id, j.attempts, j.started_at
    )
    SELECT d.id, d.attempt, d.started,
           CASE
               WHEN u.id IS NOT NULL THEN 'kept'
               WHEN l.id IS NULL THEN
                   CASE WHEN EXISTS (SELECT 1 FROM fila_jobs j WHERE j.id = d.id) THEN 'busy' ELSE 'lost' END
               WHEN l.state = 'cancelled' AND l.attempts = d.attempt AND l.started_at = d.started THEN 'cancelled'
               ELSE 'lost'
           END
    FROM d
    LEFT JOIN updated u ON u.id = d.id AND u.attempts = d.attempt AND u.started_at = d.started
    LEFT JOIN locked l ON l.id = d.id;
END
$$;

CREATE OR REPLACE FUNCTION fila_release(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_reason text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    WITH d AS (
        SELECT * FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
    ), locked AS (
        SELECT j.id, j.state, j.attempts, j.started_at FROM fila_jobs j
        WHERE j.id = ANY (p_ids)
        FOR UPDATE
    ), mine AS (
        SELECT l.id FROM locked l JOIN d
            ON l.id = d.id AND l.attempts = d.attempt AND l.started_at = d.started AND l.state = 'running'
    )
    UPDATE fila_jobs j
    SET state       = 'pending',
        attempts    = j.attempts - 1,
        run_at      = now(),
        lease_until = NULL,
        errors      = fila_append_error(j.errors, j.attempts, p_reason || ' (not counted as an attempt)')
    FROM mine m
    WHERE j.id = m.id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

ALTER FUNCTION fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[]) SET jit = off;
ALTER FUNCTION fila_heartbeat(bigint[], int[], timestamptz[], float8) SET jit = off;
ALTER FUNCTION fila_release(bigint[], int[], timestamptz[], text) SET jit = off;
