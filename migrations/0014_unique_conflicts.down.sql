-- 0014 down: the functions and the update trigger as 0013 and 0003 left them.

DROP TRIGGER fila_jobs_notify_update ON fila_jobs;
CREATE TRIGGER fila_jobs_notify_update
    AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.run_at <> NEW.run_at))
          OR (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.concurrency_key IS NOT NULL))
    EXECUTE FUNCTION fila_notify_update();

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
            FOR NO KEY UPDATE OF j SKIP LOCKED) x
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
            FOR NO KEY UPDATE OF j) x
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

CREATE OR REPLACE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms double precision, p_limit_kinds text[], p_limit_paths text[], p_limit_max integer[])
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, rescued integer, next_due_ms double precision)
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v_left    int := p_limit;
    v_prio    smallint;
    v_n       int;
    v_free    text[] := p_kinds;   -- kinds without a limit
    v_full    text[] := '{}';      -- (kind, key) pairs found full in this call
    v_pair    text;
    v_running int;
    c         record;
    v_rescued int := 0;
    v_paused  bool;
    v_due     float8;
BEGIN
    IF cardinality(p_limit_kinds) > 0 THEN
        v_free := ARRAY(SELECT k FROM unnest(p_kinds) AS k WHERE k <> ALL (p_limit_kinds));
        IF NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused) THEN
            -- Limited kinds first, one priority at a time, at most 500
            -- candidates per priority so a long line of jobs of full keys
            -- costs a bounded scan.
            SELECT min(x.priority) INTO v_prio FROM fila_jobs x
            WHERE x.state = 'pending' AND x.queue = p_queue AND x.kind = ANY (p_limit_kinds);
            WHILE v_prio IS NOT NULL AND v_left > 0 LOOP
                FOR c IN
                    SELECT x.id, x.kind,
                           coalesce(x.payload #>> string_to_array(nullif(l.path, ''), '.'), '') AS key, l.max
                    FROM fila_jobs x
                    JOIN unnest(p_limit_kinds, p_limit_paths, p_limit_max) AS l(kind, path, max) ON l.kind = x.kind
                    WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority = v_prio
                      AND x.run_at <= now() AND x.kind = ANY (p_limit_kinds)
                    ORDER BY x.run_at, x.id
                    LIMIT 500
                LOOP
                    v_pair := c.kind || E'\x1f' || c.key;
                    CONTINUE WHEN v_pair = ANY (v_full);
                    IF NOT pg_try_advisory_xact_lock(1718185057, hashtext(v_pair)) THEN
                        v_full := v_full || v_pair;
                        CONTINUE;
                    END IF;
                    SELECT count(*) INTO v_running FROM fila_jobs y
                    WHERE y.state = 'running' AND y.kind = c.kind AND y.concurrency_key = c.key;
                    IF v_running >= c.max THEN
                        v_full := v_full || v_pair;
                        CONTINUE;
                    END IF;
                    RETURN QUERY
                    WITH u AS (
                        UPDATE fila_jobs j
                        SET state           = 'running',
                            attempts        = j.attempts + 1,
                            lease_until     = now() + make_interval(secs => p_lease_ms / 1000),
                            started_at      = now(),
                            concurrency_key = c.key
                        WHERE j.id = (SELECT x.id FROM fila_jobs x
                                      WHERE x.id = c.id AND x.state = 'pending'
                                      FOR NO KEY UPDATE SKIP LOCKED)
                        RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
                                  j.created_at, j.started_at,
                                  (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8)
                    SELECT u.*, NULL::int, NULL::float8 FROM u;
                    GET DIAGNOSTICS v_n = ROW_COUNT;
                    v_left := v_left - v_n;
                    EXIT WHEN v_left <= 0;
                END LOOP;
                SELECT min(x.priority) INTO v_prio FROM fila_jobs x
                WHERE x.state = 'pending' AND x.queue = p_queue AND x.kind = ANY (p_limit_kinds)
                  AND x.priority > v_prio;
            END LOOP;
        END IF;
    END IF;

    -- Jobs waiting for a full key's slot set no timer: the slot's release
    -- wakes the queue (see fila_jobs_notify_update). A paused queue claims
    -- nothing and sets no timer: resuming wakes its workers.
    -- Leases that expired are rescued only when there are some: an index
    -- probe decides, and the usual claim plans and runs no rescue.
    IF EXISTS (SELECT 1 FROM fila_jobs x WHERE x.state = 'running' AND x.lease_until < now()) THEN
        WITH r AS (
            UPDATE fila_jobs j
            SET state       = CASE WHEN fila_rescue_counts(j) AND j.attempts >= j.max_attempts
                                   THEN 'dead' ELSE 'pending' END,
                attempts    = CASE WHEN fila_rescue_counts(j) THEN j.attempts ELSE j.attempts - 1 END,
                unstarted_rescues = j.unstarted_rescues + CASE WHEN fila_rescue_counts(j) THEN 0 ELSE 1 END,
                run_at      = now(),
                lease_until = NULL,
                finished_at = CASE WHEN fila_rescue_counts(j) AND j.attempts >= j.max_attempts THEN now() END,
                last_error  = 'attempt ' || j.attempts || ': ' || fila_rescue_reason(j),
                errors      = fila_append_error(j.errors, j.attempts, fila_rescue_reason(j))
            WHERE j.id IN (
                SELECT x.id FROM fila_jobs x
                WHERE x.state = 'running' AND x.lease_until < now()
                ORDER BY x.lease_until
                LIMIT 100
                FOR NO KEY UPDATE SKIP LOCKED)
            RETURNING 1)
        SELECT count(*) INTO v_rescued FROM r;
    END IF;
    v_paused := EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused);
    IF v_left > 0 AND NOT v_paused THEN
        RETURN QUERY
        WITH RECURSIVE prios AS (
            (SELECT x.priority AS p FROM fila_jobs x
             WHERE x.state = 'pending' AND x.queue = p_queue
             ORDER BY x.priority
             LIMIT 1)
            UNION ALL
            SELECT (SELECT x.priority FROM fila_jobs x
                    WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority > prios.p
                    ORDER BY x.priority
                    LIMIT 1)
            FROM prios WHERE prios.p IS NOT NULL
        ), cand AS (
            SELECT c.id FROM prios CROSS JOIN LATERAL (
                SELECT x.id FROM fila_jobs x
                WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority = prios.p
                  AND x.run_at <= now() AND x.kind = ANY (v_free)
                ORDER BY x.run_at, x.id
                LIMIT v_left
                FOR NO KEY UPDATE SKIP LOCKED) c
            WHERE prios.p IS NOT NULL
            LIMIT v_left
        )
        UPDATE fila_jobs j
        SET state       = 'running',
            attempts    = j.attempts + 1,
            lease_until = now() + make_interval(secs => p_lease_ms / 1000),
            started_at  = now()
        WHERE j.id IN (SELECT cand.id FROM cand)
        RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
                  j.created_at, j.started_at,
                  (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8,
                  NULL::int, NULL::float8;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_left := v_left - v_n;
    END IF;
    IF v_left > 0 AND NOT v_paused THEN
        v_due := (extract(epoch FROM least(
            (SELECT CASE WHEN bool_or(s.kind = ANY (p_kinds))
                         THEN min(s.run_at) FILTER (WHERE s.kind = ANY (p_kinds))
                         ELSE max(s.run_at) END
             FROM (SELECT x.run_at, x.kind FROM fila_jobs x
                   WHERE x.state = 'pending' AND x.queue = p_queue AND x.run_at > now()
                   ORDER BY x.run_at
                   LIMIT 100) s
             HAVING count(*) > 0),
            (SELECT min(x.lease_until) FROM fila_jobs x WHERE x.state = 'running')
        ) - clock_timestamp()) * 1000)::float8;
    END IF;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::smallint, NULL::int, NULL::int,
                        NULL::timestamptz, NULL::timestamptz, NULL::float8, v_rescued, v_due;
END
$function$;

CREATE OR REPLACE FUNCTION fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms float8)
RETURNS TABLE (id bigint, kind text, payload text, priority smallint, attempt int, max_attempts int,
               created_at timestamptz, started_at timestamptz, wait_ms float8)
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => p_lease_ms / 1000),
        started_at  = now()
    WHERE j.id = (SELECT x.id FROM fila_jobs x
                  WHERE x.id = p_id AND x.state = 'pending' AND x.queue = p_queue
                    AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                    AND NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused)
                  FOR NO KEY UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8;
END
$$;

CREATE OR REPLACE FUNCTION fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms float8)
RETURNS TABLE (id bigint, kind text, payload text, priority smallint, attempt int, max_attempts int,
               created_at timestamptz, started_at timestamptz, wait_ms float8)
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => p_lease_ms / 1000),
        started_at  = now()
    WHERE j.id = (SELECT x.id FROM fila_jobs x
                  WHERE x.id = p_id AND x.state = 'pending' AND x.queue = p_queue
                    AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                    AND NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused)
                  FOR NO KEY UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8;
END
$$;

DROP FUNCTION fila_unique_note(text, bigint, text);
DROP FUNCTION fila_unique_holder(bigint, text, text, text[], text, text);
