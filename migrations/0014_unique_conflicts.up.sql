-- 0014: a unique key that another job holds never fails a batch.
--
-- A unique key is held by the jobs whose state is in their unique_states
-- (by default pending and running). With states that leave out the one a
-- job is in, another job with the same key may be enqueued meanwhile: with
-- unique_states = {pending} (one queued while one runs), a running job's
-- retry, the rescue of its expired lease or its release at shutdown moved
-- it back to pending beside the newer job, and the unique index refused
-- the whole statement. The outcome writer then retried its batch for ever,
-- so nothing else that worker finished was written; fila_claim, whose
-- rescue is not limited to the caller's queue, failed on every queue for
-- every worker.
--
-- Each statement that moves a job into a state now looks, for the jobs
-- that carry a key only, for another job holding it:
-- - back to pending (a retry, a rescue, a release): the job is not run
--   again, the holder runs instead. It ends cancelled (not dead: nothing is
--   wrong with it), its errors saying which job took its place;
-- - to completed or dead: the outcome stands and the job lets its key go
--   (unique_key set to NULL, said in its errors);
-- - to running (a claim), with unique_states = {running} say: the job is
--   skipped and waits, pending; the holder's end wakes the queue.
-- A job that moves between two states of its unique_states already holds
-- its key, so no other job can: nothing is looked up.

-- The job other than p_id that holds unique key p_key of kind p_kind, when a
-- job with unique_states p_states moving from state p_from to p_to would
-- need it; NULL when it would not, or nobody does.
CREATE FUNCTION fila_unique_holder(p_id bigint, p_kind text, p_key text, p_states text[], p_from text, p_to text)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_key IS NOT NULL
                 AND p_to = ANY (coalesce(p_states, '{pending,running}'))
                 AND NOT p_from = ANY (coalesce(p_states, '{pending,running}'))
            THEN (SELECT h.id FROM fila_jobs h
                  WHERE h.kind = p_kind AND h.unique_key = p_key AND h.id <> p_id
                    AND h.unique_key IS NOT NULL AND h.state = ANY (coalesce(h.unique_states, '{pending,running}'))
                  LIMIT 1) END
$$;

-- What a job moving to p_to says of the unique key p_key that p_holder
-- holds; NULL when no job holds it.
CREATE FUNCTION fila_unique_note(p_key text, p_holder bigint, p_to text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_holder IS NULL THEN NULL
                WHEN p_to = 'pending' THEN ' (not retried: its unique key ' || p_key || ' is held by job ' || p_holder || ', which runs instead)'
                ELSE ' (unique key ' || p_key || ' is held by job ' || p_holder || ': this job lets it go)' END
$$;

-- A running job whose unique key left out pending (so jobs of its key may
-- wait, pending, for it to end) wakes its queue when it ends, as a job with
-- a concurrency key does.
DROP TRIGGER fila_jobs_notify_update ON fila_jobs;
CREATE TRIGGER fila_jobs_notify_update
    AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.run_at <> NEW.run_at))
          OR (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.concurrency_key IS NOT NULL)
          OR (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.unique_key IS NOT NULL
              AND NOT 'pending' = ANY (coalesce(OLD.unique_states, '{pending,running}'))))
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
            SELECT j.id, j.state, j.attempts, j.started_at, j.kind, j.unique_key, j.unique_states, d.attempt, d.started
            FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
            JOIN fila_jobs j ON j.id = d.id
            FOR NO KEY UPDATE OF j) x
        ORDER BY x.id -- every lock before the first update, as in fila_finish
    ), planned AS (
        -- As in fila_finish: a job whose unique key another job took
        -- meanwhile is not given back; that job runs instead.
        SELECT m.*, CASE WHEN m.unique_key IS NOT NULL AND m.state = 'running'
                         THEN fila_unique_holder(m.id, m.kind, m.unique_key, m.unique_states, 'running', 'pending') END AS holder
        FROM locked m
    )
    UPDATE fila_jobs j
    SET state       = CASE WHEN m.holder IS NULL THEN 'pending' ELSE 'cancelled' END,
        attempts    = j.attempts - 1,
        run_at      = now(),
        lease_until = NULL,
        finished_at = CASE WHEN m.holder IS NOT NULL THEN now() END,
        errors      = fila_append_error(j.errors, j.attempts, p_reason || ' (not counted as an attempt)'
                      || coalesce(fila_unique_note(j.unique_key, m.holder, 'pending'), ''))
    FROM planned m
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
                                        AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
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
        -- A rescued job whose unique key another job took meanwhile (one
        -- enqueued while it ran, its key not held while running) is not
        -- retried: that job runs instead. One that goes to dead keeps its
        -- outcome and lets the key go.
        WITH x AS (
            SELECT x.id, x.kind, x.unique_key, x.unique_states,
                   CASE WHEN fila_rescue_counts(x) AND x.attempts >= x.max_attempts THEN 'dead' ELSE 'pending' END AS target
            FROM fila_jobs x
            WHERE x.state = 'running' AND x.lease_until < now()
            ORDER BY x.lease_until
            LIMIT 100
            FOR NO KEY UPDATE SKIP LOCKED
        ), m AS (
            SELECT x.id, x.target,
                   CASE WHEN x.unique_key IS NOT NULL
                        THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'running', x.target) END AS holder
            FROM x
        ), r AS (
            UPDATE fila_jobs j
            SET state       = CASE WHEN m.holder IS NOT NULL AND m.target = 'pending' THEN 'cancelled' ELSE m.target END,
                attempts    = CASE WHEN fila_rescue_counts(j) THEN j.attempts ELSE j.attempts - 1 END,
                unstarted_rescues = j.unstarted_rescues + CASE WHEN fila_rescue_counts(j) THEN 0 ELSE 1 END,
                run_at      = now(),
                lease_until = NULL,
                finished_at = CASE WHEN m.target = 'dead' OR m.holder IS NOT NULL THEN now() END,
                unique_key  = CASE WHEN m.holder IS NOT NULL AND m.target = 'dead' THEN NULL ELSE j.unique_key END,
                last_error  = 'attempt ' || j.attempts || ': ' || fila_rescue_reason(j)
                              || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), ''),
                errors      = fila_append_error(j.errors, j.attempts, fila_rescue_reason(j)
                              || coalesce(fila_unique_note(j.unique_key, m.holder, m.target), ''))
            FROM m
            WHERE j.id = m.id
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
                  AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
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
                    AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
                  FOR NO KEY UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8;
END
$$;
