-- 0003: flow control. Queues that can be paused, jobs that are unique while
-- in chosen states, kinds limited to N running jobs per concurrency key, and
-- recurring tasks enqueued exactly once per time slot.

-- A paused queue's jobs stay pending: every claim looks here first (one
-- primary-key lookup in a table of a few rows).
CREATE TABLE fila_queues (
    queue      text PRIMARY KEY
               CONSTRAINT fila_queues_queue_valid CHECK (queue ~ '^[A-Za-z0-9_.-]{1,58}$'),
    paused     bool        NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Resuming a queue wakes its workers at once, like a new job would.
CREATE FUNCTION fila_notify_resume() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fila_' || NEW.queue, '');
    IF current_setting('wal_level') = 'logical' THEN
        PERFORM pg_logical_emit_message(true, 'fila', NEW.queue);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER fila_queues_notify_resume
    AFTER UPDATE OF paused ON fila_queues
    FOR EACH ROW WHEN (OLD.paused AND NOT NEW.paused)
    EXECUTE FUNCTION fila_notify_resume();

ALTER TABLE fila_jobs
    -- A job with a unique_key is unique, per kind, among the jobs in
    -- unique_states (by default pending and running).
    ADD COLUMN unique_key text,
    ADD COLUMN unique_states text[]
        CONSTRAINT fila_jobs_unique_states_valid
        CHECK (unique_states <@ ARRAY['pending', 'running', 'completed', 'dead', 'cancelled']),
    -- The concurrency key a running job of a limited kind holds, written by
    -- the claim from the job's payload.
    ADD COLUMN concurrency_key text;

-- Enforced by the database, so it holds across processes and for plain SQL
-- producers: INSERT … ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT
-- NULL AND state = ANY (coalesce(unique_states, '{pending,running}')) DO
-- NOTHING.
CREATE UNIQUE INDEX fila_jobs_unique_idx ON fila_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND state = ANY (coalesce(unique_states, '{pending,running}'::text[]));

-- Running jobs per (kind, concurrency key), counted by every limited claim.
CREATE INDEX fila_jobs_concurrency_idx ON fila_jobs (kind, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- A running job of a limited kind that stops running frees a slot of its
-- key: the queue's workers are woken, as for a job that became pending, so
-- a job waiting for that slot starts at once.
DROP TRIGGER fila_jobs_notify_update ON fila_jobs;
CREATE TRIGGER fila_jobs_notify_update
    AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN ((NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.run_at <> NEW.run_at))
          OR (OLD.state = 'running' AND NEW.state <> 'running' AND OLD.concurrency_key IS NOT NULL))
    EXECUTE FUNCTION fila_notify_update();

CREATE OR REPLACE FUNCTION fila_notify_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sent text := coalesce(current_setting('fila.notified', true), '');
BEGIN
    IF NEW.state = 'pending' AND NEW.run_at > now() + interval '10 minutes' THEN
        RETURN NULL;
    END IF;
    IF position(',' || NEW.queue || ',' IN sent) = 0 THEN
        PERFORM pg_notify('fila_' || NEW.queue, NEW.id::text);
        IF current_setting('wal_level') = 'logical' THEN
            PERFORM pg_logical_emit_message(true, 'fila', NEW.queue);
        END IF;
        PERFORM set_config('fila.notified', coalesce(nullif(sent, ''), ',') || NEW.queue || ',', true);
    END IF;
    RETURN NULL;
END
$$;

-- Recurring tasks: one row per task, written by the workers that schedule
-- it. last_slot moves forward with a conditional UPDATE in the transaction
-- that enqueues the slot's job, so one job per slot is enqueued however many
-- processes schedule the task; the job also carries the unique key
-- 'fila:recurring:<task>:<slot>' in every state, so not even a slot written
-- by hand can enqueue twice.
CREATE TABLE fila_recurring (
    task         text PRIMARY KEY CONSTRAINT fila_recurring_task_valid CHECK (task <> '' AND length(task) <= 200),
    schedule     text        NOT NULL,
    time_zone    text        NOT NULL DEFAULT 'UTC',
    kind         text        NOT NULL,
    queue        text        NOT NULL DEFAULT 'default',
    payload      jsonb       NOT NULL DEFAULT '{}',
    max_attempts int         NOT NULL DEFAULT 5,
    missed       text        NOT NULL DEFAULT 'latest' CHECK (missed IN ('latest', 'none')),
    last_slot    timestamptz,
    last_job_id  bigint,
    next_slot    timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- fila_claim, with pause and concurrency limits. p_limit_kinds,
-- p_limit_paths and p_limit_max describe the limited kinds among p_kinds:
-- at most p_limit_max[i] jobs of p_limit_kinds[i] run at once per value of
-- the payload at the dotted path p_limit_paths[i] ('' when absent), across
-- every worker.
--
-- Kinds without a limit (the common case) are claimed by one statement, so
-- a call costs one cached plan: it rescues expired leases, claims walking
-- the queue one priority at a time (a recursive scan of the distinct
-- priorities, then per priority an index range that stops at the first job
-- scheduled for later, however many are), and returns the summary row.
--
-- A limited job is claimed one at a time: the claim takes a transaction
-- advisory lock on its (kind, key) without waiting (another claim deciding
-- the same key means skipping it this time), then counts the running jobs
-- of that key in a fresh snapshot, which sees every claim committed before
-- the lock was granted. No claim ever waits on a lock.
DROP FUNCTION fila_claim(text, text[], int, float8);
CREATE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit int, p_lease_ms float8,
                           p_limit_kinds text[], p_limit_paths text[], p_limit_max int[])
RETURNS TABLE (id bigint, kind text, payload text, priority smallint, attempt int, max_attempts int,
               created_at timestamptz, started_at timestamptz, wait_ms float8,
               rescued int, next_due_ms float8)
LANGUAGE plpgsql AS $$
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
                                      FOR UPDATE SKIP LOCKED)
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
    RETURN QUERY
    WITH RECURSIVE rescued AS (
        UPDATE fila_jobs j
        SET state       = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
            run_at      = now(),
            lease_until = NULL,
            finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
            last_error  = 'attempt ' || j.attempts || ': lease expired at ' || j.lease_until
                          || ' (the worker stopped heartbeating: crashed, killed or stalled)',
            errors      = fila_append_error(j.errors, j.attempts, 'lease expired at ' || j.lease_until
                          || ' (the worker stopped heartbeating: crashed, killed or stalled)')
        WHERE j.id IN (
            SELECT x.id FROM fila_jobs x
            WHERE x.state = 'running' AND x.lease_until < now()
            ORDER BY x.lease_until
            LIMIT 100
            FOR UPDATE SKIP LOCKED)
        RETURNING 1
    ), paused AS (
        SELECT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused) AS yes
    ), prios AS (
        (SELECT x.priority AS p FROM fila_jobs x
         WHERE x.state = 'pending' AND x.queue = p_queue AND v_left > 0 AND NOT (SELECT yes FROM paused)
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
            FOR UPDATE SKIP LOCKED) c
        WHERE prios.p IS NOT NULL
        LIMIT v_left
    ), claimed AS (
        UPDATE fila_jobs j
        SET state       = 'running',
            attempts    = j.attempts + 1,
            lease_until = now() + make_interval(secs => p_lease_ms / 1000),
            started_at  = now()
        WHERE j.id IN (SELECT cand.id FROM cand)
        RETURNING j.id, j.kind, j.payload::text AS payload, j.priority, j.attempts, j.max_attempts,
                  j.created_at, j.started_at,
                  (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8 AS wait_ms
    )
    (SELECT cl.id, cl.kind, cl.payload, cl.priority, cl.attempts, cl.max_attempts, cl.created_at, cl.started_at,
            cl.wait_ms, NULL::int, NULL::float8
     FROM claimed cl
     ORDER BY cl.priority, cl.id)
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           (SELECT count(*)::int FROM rescued),
           CASE WHEN (SELECT count(*) FROM claimed) < v_left AND NOT (SELECT yes FROM paused) THEN
               (extract(epoch FROM least(
                   -- The next job of this worker's kinds among the next 100
                   -- scheduled; if none is, the 100th's time: waking then
                   -- costs one claim, while scanning every job scheduled of
                   -- other kinds would cost every claim.
                   (SELECT CASE WHEN bool_or(s.kind = ANY (p_kinds))
                                THEN min(s.run_at) FILTER (WHERE s.kind = ANY (p_kinds))
                                ELSE max(s.run_at) END
                    FROM (SELECT x.run_at, x.kind FROM fila_jobs x
                          WHERE x.state = 'pending' AND x.queue = p_queue AND x.run_at > now()
                          ORDER BY x.run_at
                          LIMIT 100) s
                    HAVING count(*) > 0),
                   (SELECT min(x.lease_until) FROM fila_jobs x WHERE x.state = 'running')
               ) - clock_timestamp()) * 1000)::float8
           END;
END
$$;
