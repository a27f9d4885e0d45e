-- 0030 down: a job's own policy travels in its metadata again, under
-- "fila". A user's own "fila" key of a job that has a policy gives way to
-- it, as the versions before read that key as Fila's; metadata pushed past
-- 16384 bytes by it fails the rollback (fila_jobs_tags_metadata_valid).

DROP FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[], text);
DROP FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[], text[], text[], int[], float8[], text);
DROP FUNCTION fila_claim_id(bigint, text, text[], float8, text);

CREATE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms double precision, p_limit_kinds text[], p_limit_paths text[], p_limit_max integer[], p_rate_kinds text[], p_rate_paths text[], p_rate_max integer[], p_rate_period_ms double precision[], p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, rescued integer, next_due_ms double precision, metadata text, tags text[])
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
    v_kinds   text[] := p_limit_kinds || p_rate_kinds;  -- kinds with a limit of either sort
    v_free    text[] := p_kinds;   -- kinds without a limit
    v_full    text[] := '{}';      -- (kind, key) pairs found full in this call
    v_rfull   text[] := '{}';      -- (kind, rate key) pairs found out of starts in this call
    v_rpairs  text[] := '{}';      -- (kind, rate key) pairs counted in this call,
    v_rleft   int[]  := '{}';      -- and the starts each has left
    v_rdue    timestamptz;         -- the earliest a start of a pair out of starts frees
    v_at      timestamptz;
    v_i       int;
    v_pair    text;
    v_rpair   text;
    v_running int;
    v_seen    int;
    v_after_run timestamptz;  -- the last candidate read: the next 500 come after it
    v_after_id  bigint;
    c         record;
    v_rescued int := 0;
    v_paused  bool;
    v_due     float8;
BEGIN
    IF cardinality(v_kinds) > 0 THEN
        v_free := ARRAY(SELECT k FROM unnest(p_kinds) AS k WHERE k <> ALL (v_kinds));
        IF NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused) THEN
            -- Limited kinds first, one priority at a time, in the order
            -- they run (run_at, id). Candidates come 500 at a time, after
            -- the last one read, and those of a key already found full (or
            -- out of starts) in this call are left out by the scan itself:
            -- a long line of jobs of full keys costs index reads, never
            -- hides the jobs of free keys behind it, whatever the order
            -- they were inserted in.
            SELECT min(x.priority) INTO v_prio FROM fila_jobs x
            WHERE x.state = 'pending' AND x.queue = p_queue AND x.kind = ANY (v_kinds);
            WHILE v_prio IS NOT NULL AND v_left > 0 LOOP
                v_after_run := '-infinity';
                v_after_id  := 0;
                LOOP
                    v_seen := 0;
                    FOR c IN
                        SELECT x.id, x.kind, x.run_at, ck.key AS ckey, l.max AS cmax,
                               rk.key AS rkey, r.max AS rmax, r.period_ms
                        FROM fila_jobs x
                        LEFT JOIN unnest(p_limit_kinds, p_limit_paths, p_limit_max) AS l(kind, path, max) ON l.kind = x.kind
                        LEFT JOIN unnest(p_rate_kinds, p_rate_paths, p_rate_max, p_rate_period_ms)
                                  AS r(kind, path, max, period_ms) ON r.kind = x.kind
                        CROSS JOIN LATERAL (SELECT CASE WHEN l.kind IS NOT NULL
                            THEN coalesce(x.payload #>> string_to_array(nullif(l.path, ''), '.'), '') END AS key) ck
                        CROSS JOIN LATERAL (SELECT CASE WHEN r.kind IS NOT NULL
                            THEN coalesce(x.payload #>> string_to_array(nullif(r.path, ''), '.'), '') END AS key) rk
                        WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority = v_prio
                          AND x.run_at <= now() AND x.kind = ANY (v_kinds)
                          AND (x.run_at, x.id) > (v_after_run, v_after_id)
                          AND (ck.key IS NULL OR x.kind || E'\x1f' || ck.key <> ALL (v_full))
                          AND (rk.key IS NULL OR x.kind || E'\x1f' || rk.key <> ALL (v_rfull))
                        ORDER BY x.run_at, x.id
                        LIMIT 500
                    LOOP
                        v_seen      := v_seen + 1;
                        v_after_run := c.run_at;
                        v_after_id  := c.id;
                        IF c.ckey IS NOT NULL THEN
                            v_pair := c.kind || E'\x1f' || c.ckey;
                            CONTINUE WHEN v_pair = ANY (v_full);
                            IF NOT pg_try_advisory_xact_lock(1718185057, hashtext(v_pair)) THEN
                                v_full := v_full || v_pair;
                                CONTINUE;
                            END IF;
                            SELECT count(*) INTO v_running FROM fila_jobs y
                            WHERE y.state = 'running' AND y.kind = c.kind AND y.concurrency_key = c.ckey;
                            IF v_running >= c.cmax THEN
                                v_full := v_full || v_pair;
                                CONTINUE;
                            END IF;
                        END IF;
                        IF c.rkey IS NOT NULL THEN
                            -- A rate key's starts are rows of fila_rate_starts,
                            -- each counting until its until (its start plus
                            -- the period). Claims of one key take its lock in
                            -- turn, and each counts what the claims before it
                            -- committed: a start is allowed while fewer than
                            -- max rows count, so no period-long window holds
                            -- more than max starts of the key.
                            v_rpair := c.kind || E'\x1f' || c.rkey;
                            CONTINUE WHEN v_rpair = ANY (v_rfull);
                            v_i := array_position(v_rpairs, v_rpair);
                            IF v_i IS NULL THEN
                                IF NOT pg_try_advisory_xact_lock(1718185058, hashtext(v_rpair)) THEN
                                    -- Another claim is taking this key's starts:
                                    -- it takes what is left.
                                    v_rfull := v_rfull || v_rpair;
                                    CONTINUE;
                                END IF;
                                -- Rows are deleted a minute after they stop
                                -- counting, not at once: a claim whose
                                -- transaction began earlier (its now() is
                                -- earlier) may take the lock next, and must
                                -- still count them.
                                DELETE FROM fila_rate_starts s
                                WHERE s.kind = c.kind AND s.key = c.rkey AND s.until < now() - interval '1 minute';
                                v_rpairs := v_rpairs || v_rpair;
                                v_rleft  := v_rleft || (c.rmax - (SELECT count(*) FROM fila_rate_starts s
                                                                  WHERE s.kind = c.kind AND s.key = c.rkey
                                                                    AND s.until > now()))::int;
                                v_i := cardinality(v_rpairs);
                            END IF;
                            IF v_rleft[v_i] <= 0 THEN
                                -- Out of starts until the max-th latest start
                                -- stops counting: the worker sets its timer.
                                SELECT s.until INTO v_at FROM fila_rate_starts s
                                WHERE s.kind = c.kind AND s.key = c.rkey AND s.until > now()
                                ORDER BY s.until DESC
                                OFFSET c.rmax - 1 LIMIT 1;
                                v_rdue  := least(v_rdue, v_at);
                                v_rfull := v_rfull || v_rpair;
                                CONTINUE;
                            END IF;
                        END IF;
                        RETURN QUERY
                        WITH u AS (
                            UPDATE fila_jobs j
                            SET state           = 'running',
                                attempts        = j.attempts + 1,
                                lease_until     = now() + make_interval(secs => p_lease_ms / 1000),
                                started_at      = now(),
                                concurrency_key = c.ckey,
                                worker          = p_worker
                            WHERE j.id = (SELECT x.id FROM fila_jobs x
                                          WHERE x.id = c.id AND x.state = 'pending'
                                            AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
                                          FOR NO KEY UPDATE SKIP LOCKED)
                            RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
                                      j.created_at, j.started_at,
                                      (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8 AS wait,
                                      j.metadata::text AS metadata, j.tags)
                        SELECT u.id, u.kind, u.payload, u.priority, u.attempts, u.max_attempts, u.created_at, u.started_at,
                               u.wait, NULL::int, NULL::float8, u.metadata, u.tags FROM u;
                        GET DIAGNOSTICS v_n = ROW_COUNT;
                        IF v_n > 0 AND c.rkey IS NOT NULL THEN
                            INSERT INTO fila_rate_starts (kind, key, job_id, started_at, until)
                            VALUES (c.kind, c.rkey, c.id, now(), now() + make_interval(secs => c.period_ms / 1000));
                            v_rleft[v_i] := v_rleft[v_i] - 1;
                        END IF;
                        v_left := v_left - v_n;
                        EXIT WHEN v_left <= 0;
                    END LOOP;
                    EXIT WHEN v_seen < 500 OR v_left <= 0;
                END LOOP;
                SELECT min(x.priority) INTO v_prio FROM fila_jobs x
                WHERE x.state = 'pending' AND x.queue = p_queue AND x.kind = ANY (v_kinds)
                  AND x.priority > v_prio;
            END LOOP;
        END IF;
    END IF;

    -- Jobs waiting for a full key's slot set no timer: the slot's release
    -- wakes the queue (see fila_jobs_notify_update). Jobs waiting for a
    -- rate key's start set it to when the key's next start frees. A paused queue claims
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
            started_at  = now(),
            worker      = p_worker
        WHERE j.id IN (SELECT cand.id FROM cand)
        RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
                  j.created_at, j.started_at,
                  (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8,
                  NULL::int, NULL::float8, j.metadata::text, j.tags;
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
            (SELECT min(x.lease_until) FROM fila_jobs x WHERE x.state = 'running'),
            v_rdue
        ) - clock_timestamp()) * 1000)::float8;
    END IF;
    RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::smallint, NULL::int, NULL::int,
                        NULL::timestamptz, NULL::timestamptz, NULL::float8, v_rescued, v_due, NULL::text, NULL::text[];
END
$function$;

CREATE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms double precision, p_limit_kinds text[], p_limit_paths text[], p_limit_max integer[], p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, rescued integer, next_due_ms double precision, metadata text, tags text[])
 LANGUAGE sql
AS $function$
    SELECT * FROM fila_claim(p_queue, p_kinds, p_limit, p_lease_ms, p_limit_kinds, p_limit_paths, p_limit_max,
                             '{}', '{}', '{}', '{}', p_worker)
$function$;

CREATE FUNCTION fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms double precision, p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, metadata text, tags text[])
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => p_lease_ms / 1000),
        started_at  = now(),
        worker      = p_worker
    WHERE j.id = (SELECT x.id FROM fila_jobs x
                  WHERE x.id = p_id AND x.state = 'pending' AND x.queue = p_queue
                    AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                    AND NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused)
                    AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
                  FOR NO KEY UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8,
              j.metadata::text, j.tags;
END
$function$;

UPDATE fila_jobs
SET metadata = coalesce(metadata, '{}') || jsonb_build_object('fila', policy)
WHERE policy IS NOT NULL;

DROP FUNCTION fila_job_policy(jsonb, jsonb);
ALTER TABLE fila_jobs DROP COLUMN policy;
