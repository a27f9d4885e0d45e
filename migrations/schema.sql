-- Fila's schema as Migrate leaves it: tables with their columns,
-- constraints and indexes, then functions, then triggers.
--
-- Migration: 0031 (schema_channels)
-- Generated on PostgreSQL 15 from a freshly migrated database: do not edit.
--
-- The numbered migrations are its history, and doc.go lists which of them
-- touched each object. TestSchemaFile fails when Migrate builds anything
-- else; after changing or adding a migration, run
--
--   go test ./migrations -run TestSchemaFile -update
--
-- Applied to an empty database, this file builds the same schema (the test
-- checks that too); databases are built by Migrate.

-- Tables, each with its indexes.

CREATE TABLE fila_batches (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    sealed boolean DEFAULT false NOT NULL,
    total integer DEFAULT 0 NOT NULL,
    completed integer DEFAULT 0 NOT NULL,
    dead integer DEFAULT 0 NOT NULL,
    cancelled integer DEFAULT 0 NOT NULL,
    callback_kind text NOT NULL,
    callback_queue text DEFAULT 'default'::text NOT NULL,
    callback_payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    callback_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT fila_batches_pkey PRIMARY KEY (id),
    CONSTRAINT fila_batches_callback_after_seal CHECK ((sealed OR (callback_id IS NULL))),
    CONSTRAINT fila_batches_callback_valid CHECK (((callback_kind <> ''::text) AND (length(callback_kind) <= 200) AND (callback_queue ~ '^[A-Za-z0-9_.-]{1,58}$'::text) AND (jsonb_typeof(callback_payload) = 'object'::text)))
);

CREATE TABLE fila_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    kind text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    lease_until timestamp with time zone,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    unique_key text,
    unique_states text[],
    concurrency_key text,
    heartbeat_at timestamp with time zone,
    unstarted_rescues integer DEFAULT 0 NOT NULL,
    output jsonb,
    tags text[],
    metadata jsonb,
    worker text,
    depends_on bigint[],
    dependency_failure text,
    has_dependents boolean DEFAULT false NOT NULL,
    sequence_key text,
    sequence_prev bigint,
    sequence_on_dead text,
    batch_id bigint,
    workflow_id bigint,
    workflow_step text,
    policy jsonb,
    CONSTRAINT fila_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT fila_jobs_attempts_in_bounds CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT fila_jobs_dependency_failure_valid CHECK ((dependency_failure = ANY (ARRAY['dead'::text, 'cancel'::text, 'run'::text]))),
    CONSTRAINT fila_jobs_depends_earlier CHECK (((depends_on IS NULL) OR ((cardinality(depends_on) >= 1) AND (cardinality(depends_on) <= 1000) AND (id > ALL (depends_on))))),
    CONSTRAINT fila_jobs_finished_needs_time CHECK (((state <> ALL (ARRAY['completed'::text, 'dead'::text, 'cancelled'::text])) OR (finished_at IS NOT NULL))),
    CONSTRAINT fila_jobs_kind_valid CHECK (((kind <> ''::text) AND (length(kind) <= 200))),
    CONSTRAINT fila_jobs_max_attempts_valid CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT fila_jobs_output_size CHECK (((output IS NULL) OR (octet_length((output)::text) <= 65536))),
    CONSTRAINT fila_jobs_pending_needs_attempt_left CHECK (((state <> 'pending'::text) OR (attempts < max_attempts))),
    CONSTRAINT fila_jobs_policy_object CHECK ((jsonb_typeof(policy) = 'object'::text)),
    CONSTRAINT fila_jobs_queue_valid CHECK (((queue ~ '^[A-Za-z0-9_.-]+$'::text) AND (octet_length(queue) <= 58))),
    CONSTRAINT fila_jobs_running_needs_lease CHECK (((state <> 'running'::text) OR (lease_until IS NOT NULL))),
    CONSTRAINT fila_jobs_sequence_key_valid CHECK (((sequence_key <> ''::text) AND (length(sequence_key) <= 200))),
    CONSTRAINT fila_jobs_sequence_on_dead_valid CHECK ((sequence_on_dead = ANY (ARRAY['block'::text, 'continue'::text]))),
    CONSTRAINT fila_jobs_state_valid CHECK ((state = ANY (ARRAY['held'::text, 'waiting'::text, 'pending'::text, 'running'::text, 'completed'::text, 'dead'::text, 'cancelled'::text]))),
    CONSTRAINT fila_jobs_unique_states_valid CHECK ((unique_states <@ ARRAY['pending'::text, 'running'::text, 'completed'::text, 'dead'::text, 'cancelled'::text])),
    CONSTRAINT fila_jobs_workflow_step_valid CHECK (((workflow_step IS NULL) OR ((workflow_id IS NOT NULL) AND (workflow_step <> ''::text) AND (length(workflow_step) <= 200))))
) WITH (
    autovacuum_vacuum_scale_factor=0.01,
    autovacuum_vacuum_threshold=1000,
    autovacuum_vacuum_insert_scale_factor=0.05,
    autovacuum_analyze_scale_factor=0.02,
    autovacuum_vacuum_cost_limit=2000,
    fillfactor=85,
    autovacuum_vacuum_cost_delay=0
);

CREATE INDEX fila_jobs_batch_idx ON fila_jobs USING btree (batch_id) WHERE (batch_id IS NOT NULL);
CREATE INDEX fila_jobs_cancelled_idx ON fila_jobs USING btree (finished_at) WHERE (state = 'cancelled'::text);
CREATE INDEX fila_jobs_concurrency_idx ON fila_jobs USING btree (kind, concurrency_key) WHERE ((state = 'running'::text) AND (concurrency_key IS NOT NULL));
CREATE INDEX fila_jobs_dead_idx ON fila_jobs USING btree (kind, finished_at) WHERE (state = 'dead'::text);
CREATE INDEX fila_jobs_depends_idx ON fila_jobs USING gin (depends_on) WITH (fastupdate=off) WHERE (depends_on IS NOT NULL);
CREATE INDEX fila_jobs_finished_idx ON fila_jobs USING btree (finished_at) WHERE (state = 'completed'::text);
CREATE INDEX fila_jobs_held_idx ON fila_jobs USING btree (queue) WHERE (state = 'held'::text);
CREATE INDEX fila_jobs_lease_idx ON fila_jobs USING btree (lease_until) WHERE (state = 'running'::text);
CREATE INDEX fila_jobs_metadata_idx ON fila_jobs USING gin (metadata jsonb_path_ops) WHERE (metadata IS NOT NULL);
CREATE INDEX fila_jobs_pending_idx ON fila_jobs USING btree (queue, priority, run_at, id) WHERE (state = 'pending'::text);
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs USING btree (queue, run_at) INCLUDE (kind) WHERE (state = 'pending'::text);
CREATE INDEX fila_jobs_sequence_idx ON fila_jobs USING btree (sequence_prev) WHERE (sequence_prev IS NOT NULL);
CREATE INDEX fila_jobs_tags_idx ON fila_jobs USING gin (tags) WHERE (tags IS NOT NULL);
CREATE UNIQUE INDEX fila_jobs_unique_idx ON fila_jobs USING btree (kind, unique_key) WHERE ((unique_key IS NOT NULL) AND (state = ANY (COALESCE(unique_states, '{pending,running}'::text[]))));
CREATE INDEX fila_jobs_waiting_idx ON fila_jobs USING btree (queue) WHERE (state = 'waiting'::text);
CREATE UNIQUE INDEX fila_jobs_workflow_idx ON fila_jobs USING btree (workflow_id, workflow_step) WHERE (workflow_id IS NOT NULL);

CREATE TABLE fila_kinds (
    kind text NOT NULL,
    queue text NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_kinds_pkey PRIMARY KEY (queue, kind)
);

CREATE TABLE fila_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE fila_minutes (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    worker text NOT NULL,
    completed bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    pickup_buckets bigint[] NOT NULL,
    pickup_sum_ms double precision DEFAULT 0 NOT NULL,
    CONSTRAINT fila_minutes_pkey PRIMARY KEY (minute, queue, worker)
);

CREATE TABLE fila_queues (
    queue text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_queues_pkey PRIMARY KEY (queue),
    CONSTRAINT fila_queues_queue_valid CHECK ((queue ~ '^[A-Za-z0-9_.-]{1,58}$'::text))
);

CREATE TABLE fila_rate_starts (
    kind text NOT NULL,
    key text NOT NULL,
    job_id bigint NOT NULL,
    started_at timestamp with time zone NOT NULL,
    until timestamp with time zone NOT NULL
);

CREATE INDEX fila_rate_starts_key_idx ON fila_rate_starts USING btree (kind, key, until);
CREATE INDEX fila_rate_starts_until_idx ON fila_rate_starts USING btree (until);

CREATE TABLE fila_recurring (
    task text NOT NULL,
    schedule text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    missed text DEFAULT 'latest'::text NOT NULL,
    last_slot timestamp with time zone,
    last_job_id bigint,
    next_slot timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_recurring_pkey PRIMARY KEY (task),
    CONSTRAINT fila_recurring_missed_check CHECK ((missed = ANY (ARRAY['latest'::text, 'none'::text]))),
    CONSTRAINT fila_recurring_task_valid CHECK (((task <> ''::text) AND (length(task) <= 200)))
);

CREATE TABLE fila_river_imports (
    river_job_id bigint NOT NULL,
    imported_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_river_imports_pkey PRIMARY KEY (river_job_id)
);

CREATE TABLE fila_sequences (
    key text NOT NULL,
    tail bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_sequences_pkey PRIMARY KEY (key)
);

CREATE TABLE fila_sleepers (
    queue text NOT NULL,
    worker text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fila_sleepers_pkey PRIMARY KEY (queue, worker)
);

CREATE TABLE fila_workers (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    kinds text[] NOT NULL,
    mode text NOT NULL,
    wake_source text NOT NULL,
    wake_error text,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    degraded text,
    liveness_interval interval DEFAULT '00:05:00'::interval NOT NULL,
    recurring text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT fila_workers_pkey PRIMARY KEY (id),
    CONSTRAINT fila_workers_wake_source_check CHECK ((wake_source = ANY (ARRAY['up'::text, 'down'::text, 'none'::text])))
) WITH (
    fillfactor=50
);

-- Functions.

CREATE OR REPLACE FUNCTION fila_append_error(errors jsonb, attempt integer, err text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN jsonb_typeof(errors) IS DISTINCT FROM 'array' THEN jsonb_build_array(errors)
                WHEN jsonb_array_length(errors) >= 20 THEN errors - 0
                ELSE errors END
           || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(), 'error', err))
$function$;

CREATE OR REPLACE FUNCTION fila_batch_callback(b fila_batches)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    INSERT INTO fila_jobs (queue, kind, payload)
    VALUES (b.callback_queue, b.callback_kind, b.callback_payload || jsonb_build_object('batch', jsonb_build_object(
        'id', b.id, 'total', b.total, 'completed', b.completed, 'dead', b.dead, 'cancelled', b.cancelled)))
    RETURNING id
$function$;

CREATE OR REPLACE FUNCTION fila_batch_count(p_batch bigint, p_state text)
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    b fila_batches;
BEGIN
    UPDATE fila_batches
    SET completed = completed + (p_state = 'completed')::int,
        dead      = dead + (p_state = 'dead')::int,
        cancelled = cancelled + (p_state = 'cancelled')::int
    WHERE id = p_batch
    RETURNING * INTO b;
    IF FOUND AND b.sealed AND b.callback_id IS NULL AND b.completed + b.dead + b.cancelled >= b.total THEN
        UPDATE fila_batches SET callback_id = fila_batch_callback(b), finished_at = now() WHERE id = b.id;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms double precision, p_limit_kinds text[], p_limit_paths text[], p_limit_max integer[], p_rate_kinds text[], p_rate_paths text[], p_rate_max integer[], p_rate_period_ms double precision[], p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, rescued integer, next_due_ms double precision, metadata text, tags text[], policy text)
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
                                      j.metadata::text AS metadata, j.tags,
                                      fila_job_policy(j.policy, j.metadata)::text AS policy)
                        SELECT u.id, u.kind, u.payload, u.priority, u.attempts, u.max_attempts, u.created_at, u.started_at,
                               u.wait, NULL::int, NULL::float8, u.metadata, u.tags, u.policy FROM u;
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
                  NULL::int, NULL::float8, j.metadata::text, j.tags, fila_job_policy(j.policy, j.metadata)::text;
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
                        NULL::timestamptz, NULL::timestamptz, NULL::float8, v_rescued, v_due, NULL::text, NULL::text[], NULL::text;
END
$function$;

CREATE OR REPLACE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms double precision, p_limit_kinds text[], p_limit_paths text[], p_limit_max integer[], p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, rescued integer, next_due_ms double precision, metadata text, tags text[], policy text)
 LANGUAGE sql
AS $function$
    SELECT * FROM fila_claim(p_queue, p_kinds, p_limit, p_lease_ms, p_limit_kinds, p_limit_paths, p_limit_max,
                             '{}', '{}', '{}', '{}', p_worker)
$function$;

CREATE OR REPLACE FUNCTION fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms double precision, p_worker text)
 RETURNS TABLE(id bigint, kind text, payload text, priority smallint, attempt integer, max_attempts integer, created_at timestamp with time zone, started_at timestamp with time zone, wait_ms double precision, metadata text, tags text[], policy text)
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
              j.metadata::text, j.tags, fila_job_policy(j.policy, j.metadata)::text;
END
$function$;

CREATE OR REPLACE FUNCTION fila_complete(p_ids bigint[], p_attempts integer[], p_started timestamp with time zone[])
 RETURNS TABLE(ids bigint[], attempts integer[], started timestamp with time zone[])
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    BEGIN
        -- For this block only: undone with it when it fails, set back by
        -- hand when it succeeds. The lock-then-update below runs under the
        -- caller's lock_timeout, so a lock the completion's flow triggers
        -- wait for (a dependent's row) is waited for there, as before,
        -- instead of failing the write.
        PERFORM set_config('lock_timeout', '10ms', true);
        RETURN QUERY
        WITH updated AS (
            UPDATE fila_jobs j
            SET state = 'completed', finished_at = now(), lease_until = NULL
            FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
            WHERE j.id = d.id
              AND coalesce(j.state = 'running' AND j.attempts = d.attempt AND j.started_at = d.started
                           AND j.unique_key IS NULL, false)
            RETURNING j.id, j.attempts, j.started_at
        )
        SELECT coalesce(array_agg(u.id), '{}'), coalesce(array_agg(u.attempts), '{}'),
               coalesce(array_agg(u.started_at), '{}')
        FROM updated u;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        RETURN;
    EXCEPTION WHEN lock_not_available THEN
        NULL; -- a row is held: lock what is free, below
    END;
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
$function$;

CREATE OR REPLACE FUNCTION fila_finish(p_ids bigint[], p_attempts integer[], p_started timestamp with time zone[], p_ok boolean[], p_errs text[], p_delay_ms double precision[], p_permanent boolean[])
 RETURNS TABLE(id bigint, attempt integer, started_at timestamp with time zone, state text, due_ms double precision)
 LANGUAGE sql
AS $function$
    SELECT * FROM fila_finish(p_ids, p_attempts, p_started, p_ok, p_errs, p_delay_ms, p_permanent,
                              array_fill(false, ARRAY[cardinality(p_ids)]),
                              array_fill(NULL::text, ARRAY[cardinality(p_ids)]))
$function$;

CREATE OR REPLACE FUNCTION fila_finish(p_ids bigint[], p_attempts integer[], p_started timestamp with time zone[], p_ok boolean[], p_errs text[], p_delay_ms double precision[], p_permanent boolean[], p_snooze boolean[], p_outputs text[])
 RETURNS TABLE(id bigint, attempt integer, started_at timestamp with time zone, state text, due_ms double precision)
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
$function$;

CREATE OR REPLACE FUNCTION fila_flow_advance(j fila_jobs)
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    f record;
BEGIN
    f := fila_flow_check(j);
    IF f.state = 'pending' THEN
        UPDATE fila_jobs SET state = 'pending', run_at = greatest(run_at, now()) WHERE id = j.id;
    ELSIF f.state IN ('dead', 'cancelled') THEN
        UPDATE fila_jobs
        SET state = f.state, finished_at = now(), last_error = f.reason,
            errors = fila_append_error(errors, attempts, f.reason)
        WHERE id = j.id;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION fila_flow_check(j fila_jobs, OUT state text, OUT reason text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    v_open   bigint;
    v_failed bigint;
    v_fstate text;
    v_prev   text;
BEGIN
    IF j.depends_on IS NOT NULL THEN
        SELECT min(d.id) FILTER (WHERE d.state NOT IN ('completed', 'dead', 'cancelled')),
               min(d.id) FILTER (WHERE d.state IN ('dead', 'cancelled'))
        INTO v_open, v_failed
        FROM fila_jobs d WHERE d.id = ANY (j.depends_on);
        IF v_failed IS NOT NULL AND coalesce(j.dependency_failure, 'dead') <> 'run' THEN
            SELECT d.state INTO v_fstate FROM fila_jobs d WHERE d.id = v_failed;
            state := CASE j.dependency_failure WHEN 'cancel' THEN 'cancelled' ELSE 'dead' END;
            reason := 'dependency ' || v_failed || ' ended ' || v_fstate;
            RETURN;
        END IF;
        IF v_open IS NOT NULL THEN
            state := 'waiting';
            reason := 'waits for dependency ' || v_open;
            RETURN;
        END IF;
    END IF;
    IF j.sequence_prev IS NOT NULL THEN
        SELECT p.state INTO v_prev FROM fila_jobs p WHERE p.id = j.sequence_prev;
        IF v_prev IN ('waiting', 'pending', 'running') THEN
            state := 'waiting';
            reason := 'waits for job ' || j.sequence_prev || ', before it in sequence ' || j.sequence_key;
            RETURN;
        END IF;
        IF v_prev = 'dead' AND coalesce(j.sequence_on_dead, 'block') = 'block' THEN
            state := 'waiting';
            reason := 'sequence ' || j.sequence_key || ' is blocked: job ' || j.sequence_prev
                      || ' before it is dead (retry or delete it to go on)';
            RETURN;
        END IF;
    END IF;
    state := 'pending';
END
$function$;

CREATE OR REPLACE FUNCTION fila_heartbeat(p_ids bigint[], p_attempts integer[], p_started timestamp with time zone[], p_lease_ms double precision)
 RETURNS TABLE(id bigint, attempt integer, started_at timestamp with time zone, status text)
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
    WITH locked AS (
        SELECT * FROM (
            SELECT j.id, j.state, j.attempts, j.started_at, d.attempt, d.started
            FROM unnest(p_ids, p_attempts, p_started) AS d(id, attempt, started)
            JOIN fila_jobs j ON j.id = d.id
            FOR NO KEY UPDATE OF j SKIP LOCKED) x
        ORDER BY x.id -- every lock before the first update, as in fila_finish
    ), updated AS (
        UPDATE fila_jobs j
        SET lease_until  = now() + make_interval(secs => p_lease_ms / 1000),
            heartbeat_at = now()
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
$function$;

CREATE OR REPLACE FUNCTION fila_job_policy(p_policy jsonb, p_metadata jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT coalesce(p_policy,
                    CASE WHEN jsonb_typeof(p_metadata->'fila') = 'object'
                              AND (p_metadata->'fila') ?| '{timeout_ms,retry_base_ms,retry_max_ms}'::text[]
                         THEN p_metadata->'fila' END)
$function$;

CREATE OR REPLACE FUNCTION fila_payload_limits(OUT max_bytes integer, OUT max_depth integer)
 RETURNS record
 LANGUAGE sql
 STABLE
AS $function$
SELECT a[1]::int, a[2]::int
FROM (SELECT (SELECT string_to_array(encode(t.tgargs, 'escape'), '\000')
              FROM pg_trigger t
              WHERE t.tgrelid = 'fila_jobs'::regclass AND t.tgname = 'fila_jobs_payload_limits'
                AND t.tgenabled <> 'D') AS a) args
$function$;

CREATE OR REPLACE FUNCTION fila_release(p_ids bigint[], p_attempts integer[], p_started timestamp with time zone[], p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION fila_rescue_counts(j fila_jobs)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT coalesce(j.heartbeat_at >= j.started_at, false) OR j.unstarted_rescues >= 3 OR j.attempts = 0
$function$;

CREATE OR REPLACE FUNCTION fila_rescue_reason(j fila_jobs)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT 'lease expired at ' || j.lease_until || CASE WHEN fila_rescue_counts(j)
        THEN ' (the worker stopped heartbeating: crashed, killed, stalled or cut off)'
        ELSE ' before its worker was seen to run it (the claim''s reply was lost, or the worker stopped at once); not counted as an attempt'
    END
$function$;

CREATE OR REPLACE FUNCTION fila_set_payload_limits(max_bytes integer, max_depth integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF max_bytes IS NULL OR max_bytes < 1024 OR max_bytes > 268435455 THEN
        RAISE EXCEPTION 'max_bytes % out of range: allowed 1024 to 268435455 (jsonb''s own limit)', max_bytes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_depth IS NULL OR max_depth < 1 OR max_depth > 10000 THEN
        RAISE EXCEPTION 'max_depth % out of range: allowed 1 to 10000', max_depth
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DROP TRIGGER IF EXISTS fila_jobs_payload_limits ON fila_jobs;
    EXECUTE format($t$CREATE TRIGGER fila_jobs_payload_limits
    AFTER INSERT OR UPDATE OF payload ON fila_jobs
    FOR EACH ROW
    WHEN (pg_column_size(NEW.payload) > %s)
    EXECUTE FUNCTION fila_payload_check(%L, %L)$t$, max_bytes / 128, max_bytes, max_depth);
END
$function$;

CREATE OR REPLACE FUNCTION fila_sleep(p_queue text, p_worker text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET jit TO 'off'
AS $function$
BEGIN
    IF NOT pg_try_advisory_xact_lock(1718185058, hashtext(p_queue)) THEN
        RETURN false;
    END IF;
    INSERT INTO fila_sleepers (queue, worker) VALUES (p_queue, p_worker)
    ON CONFLICT (queue, worker) DO NOTHING;
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION fila_unique_holder(p_id bigint, p_kind text, p_key text, p_states text[], p_from text, p_to text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN p_key IS NOT NULL
                 AND p_to = ANY (coalesce(p_states, '{pending,running}'))
                 AND NOT p_from = ANY (coalesce(p_states, '{pending,running}'))
            THEN (SELECT h.id FROM fila_jobs h
                  WHERE h.kind = p_kind AND h.unique_key = p_key AND h.id <> p_id
                    AND h.unique_key IS NOT NULL AND h.state = ANY (coalesce(h.unique_states, '{pending,running}'))
                  LIMIT 1) END
$function$;

CREATE OR REPLACE FUNCTION fila_unique_note(p_key text, p_holder bigint, p_to text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN p_holder IS NULL THEN NULL
                WHEN p_to = 'pending' THEN ' (not retried: its unique key ' || p_key || ' is held by job ' || p_holder || ', which runs instead)'
                ELSE ' (unique key ' || p_key || ' is held by job ' || p_holder || ': this job lets it go)' END
$function$;

CREATE OR REPLACE FUNCTION fila_wake_held(p_ids bigint[], p_schema text)
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
DECLARE
    r record;
BEGIN
    -- The runnable jobs among p_ids that this transaction did not insert:
    -- the caller locks them, and a claim skips them until it commits.
    FOR r IN
        SELECT h.queue, min(h.id) AS id FROM fila_jobs h
        WHERE h.id = ANY (p_ids) AND h.xmin <> pg_current_xact_id()::xid
          AND h.state = 'pending' AND h.run_at <= now() + interval '10 minutes'
        GROUP BY h.queue
    LOOP
        PERFORM fila_wake_queue(r.queue, r.id, p_schema);
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION fila_wake_queue(p_queue text, p_id bigint, p_schema text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    sent text := coalesce(current_setting('fila.notified', true), '');
BEGIN
    -- Once per queue and transaction: every notification of a transaction
    -- is delivered at its commit, and one wakes the queue's workers.
    IF position(',' || p_queue || ',' IN sent) = 0 THEN
        PERFORM pg_notify(CASE WHEN p_schema = 'public' THEN 'fila_' || p_queue
                               ELSE left('fila:' || p_schema || ':' || p_queue, 63) END, p_id::text);
        IF current_setting('wal_level') = 'logical' THEN
            PERFORM pg_logical_emit_message(true, CASE WHEN p_schema = 'public' THEN 'fila' ELSE 'fila:' || p_schema END, p_queue);
        END IF;
        PERFORM set_config('fila.notified', coalesce(nullif(sent, ''), ',') || p_queue || ',', true);
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION fila_worker_live(w fila_workers)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT w.last_seen_at > now() - 3 * w.liveness_interval
$function$;

CREATE OR REPLACE FUNCTION fila_worker_seen(p_id text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE fila_workers SET last_seen_at = now() WHERE id = p_id;
    RETURN FOUND;
END
$function$;

CREATE OR REPLACE FUNCTION fila_workflow_retry(p_workflow bigint, OUT o_id bigint, OUT o_from text, OUT o_to text)
 RETURNS SETOF record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    v_ids  bigint[];
    v_from text[];
    v_id   bigint;
    r      record;
    c      fila_jobs;
BEGIN
    FOR r IN SELECT j.id, j.state FROM fila_jobs j
             WHERE j.workflow_id = p_workflow AND j.state IN ('dead', 'cancelled')
             ORDER BY j.id FOR UPDATE LOOP
        v_ids := v_ids || r.id;
        v_from := v_from || r.state;
    END LOOP;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM fila_jobs d
    WHERE d.id IN (SELECT unnest(x.depends_on) FROM fila_jobs x WHERE x.id = ANY (v_ids))
      AND d.id <> ALL (v_ids)
    ORDER BY d.id FOR SHARE;
    -- As a retry of one job: attempts from 0, the error history kept, and
    -- a job cancelled while it ran due only once that attempt's lease ends.
    UPDATE fila_jobs j
    SET state = CASE WHEN j.depends_on IS NULL AND j.sequence_prev IS NULL THEN 'pending' ELSE 'waiting' END,
        run_at = greatest(now(), j.lease_until), attempts = 0, lease_until = NULL, finished_at = NULL
    WHERE j.id = ANY (v_ids);
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO c FROM fila_jobs j WHERE j.id = v_id;
        IF c.state = 'waiting' THEN
            PERFORM fila_flow_advance(c);
        END IF;
    END LOOP;
    RETURN QUERY
        SELECT f.id, f.from_state, j.state
        FROM unnest(v_ids, v_from) AS f(id, from_state)
        JOIN fila_jobs j ON j.id = f.id
        ORDER BY f.id;
END
$function$;

-- Triggers, each after the function it runs.

CREATE OR REPLACE FUNCTION fila_batch_seal()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
BEGIN
    NEW.total := (SELECT count(*) FROM fila_jobs j WHERE j.batch_id = NEW.id);
    IF NEW.callback_id IS NULL AND NEW.completed + NEW.dead + NEW.cancelled >= NEW.total THEN
        NEW.callback_id := fila_batch_callback(NEW);
        NEW.finished_at := now();
    END IF;
    RETURN NEW;
END
$function$;

CREATE TRIGGER fila_batches_seal BEFORE UPDATE OF sealed ON fila_batches
    FOR EACH ROW
    WHEN ((new.sealed AND (NOT old.sealed)))
    EXECUTE FUNCTION fila_batch_seal();

CREATE OR REPLACE FUNCTION fila_flow_finished()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    r fila_jobs;
    c fila_jobs;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF r.has_dependents THEN
        FOR c IN SELECT j.* FROM fila_jobs j WHERE j.depends_on @> ARRAY[r.id] AND j.state = 'waiting'
                 ORDER BY j.id FOR NO KEY UPDATE LOOP
            PERFORM fila_flow_advance(c);
        END LOOP;
    END IF;
    IF r.sequence_key IS NOT NULL THEN
        FOR c IN SELECT j.* FROM fila_jobs j WHERE j.sequence_prev = r.id AND j.state = 'waiting'
                 ORDER BY j.id FOR NO KEY UPDATE LOOP
            PERFORM fila_flow_advance(c);
        END LOOP;
    END IF;
    IF r.batch_id IS NOT NULL AND (TG_OP = 'UPDATE' OR OLD.state IN ('waiting', 'pending', 'running')) THEN
        -- A job deleted before it finished counts as cancelled.
        PERFORM fila_batch_count(r.batch_id, CASE WHEN TG_OP = 'UPDATE' THEN r.state ELSE 'cancelled' END);
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_jobs_flow_deleted AFTER DELETE ON fila_jobs
    FOR EACH ROW
    WHEN ((old.has_dependents OR (old.sequence_key IS NOT NULL) OR (old.batch_id IS NOT NULL)))
    EXECUTE FUNCTION fila_flow_finished();

CREATE TRIGGER fila_jobs_flow_finished AFTER UPDATE OF state ON fila_jobs
    FOR EACH ROW
    WHEN (((old.state = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text])) AND (new.state = ANY (ARRAY['completed'::text, 'dead'::text, 'cancelled'::text])) AND (new.has_dependents OR (new.sequence_key IS NOT NULL) OR (new.batch_id IS NOT NULL))))
    EXECUTE FUNCTION fila_flow_finished();

CREATE OR REPLACE FUNCTION fila_flow_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    v_bad    bigint;
    v_sealed boolean;
    v_prev   bigint;
    f        record;
BEGIN
    IF NEW.state <> 'pending' THEN
        RAISE EXCEPTION 'job % (kind %) has dependencies, a sequence or a batch: it must be inserted pending, not %',
            NEW.id, to_json(NEW.kind), NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.depends_on IS NOT NULL THEN
        -- Jobs this transaction inserted need no lock: no other can see
        -- them, let alone finish them (and locking them again and again,
        -- as a workflow's jobs do, costs more with each).
        PERFORM 1 FROM fila_jobs d
        WHERE d.id = ANY (NEW.depends_on) AND d.xmin <> pg_current_xact_id()::xid
        ORDER BY d.id FOR SHARE;
        -- Counted by the primary key first; the search for the missing id
        -- (whose plan hashes the whole table) runs only when one is.
        IF array_position(NEW.depends_on, NULL) IS NOT NULL
           OR (SELECT count(*) FROM fila_jobs x WHERE x.id = ANY (NEW.depends_on))
              < (SELECT count(DISTINCT d) FROM unnest(NEW.depends_on) d) THEN
            SELECT d INTO v_bad FROM unnest(NEW.depends_on) d
            WHERE d IS NULL OR NOT EXISTS (SELECT 1 FROM fila_jobs x WHERE x.id = d) LIMIT 1;
            RAISE EXCEPTION 'job % (kind %) depends on job %, which does not exist', NEW.id, to_json(NEW.kind), coalesce(v_bad::text, 'NULL')
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        SELECT d INTO v_bad FROM unnest(NEW.depends_on) d WHERE d >= NEW.id LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job % (kind %) depends on job %, which was not inserted before it: a job depends only on jobs with lower ids',
                NEW.id, to_json(NEW.kind), v_bad USING ERRCODE = 'check_violation';
        END IF;
        -- A claim's SKIP LOCKED passes over the rows locked here until this
        -- transaction ends: wake their queues when it does (see
        -- fila_wake_held).
        PERFORM fila_wake_held(NEW.depends_on, TG_TABLE_SCHEMA);
        UPDATE fila_jobs SET has_dependents = true WHERE id = ANY (NEW.depends_on) AND NOT has_dependents;
    END IF;
    IF NEW.sequence_key IS NOT NULL THEN
        LOOP
            SELECT s.tail INTO v_prev FROM fila_sequences s WHERE s.key = NEW.sequence_key FOR UPDATE;
            IF FOUND THEN
                UPDATE fila_sequences SET tail = NEW.id, updated_at = now() WHERE key = NEW.sequence_key;
                EXIT;
            END IF;
            INSERT INTO fila_sequences (key, tail) VALUES (NEW.sequence_key, NEW.id) ON CONFLICT (key) DO NOTHING;
            IF FOUND THEN
                v_prev := NULL;
                EXIT;
            END IF;
        END LOOP;
        NEW.sequence_prev := v_prev;
        IF v_prev IS NOT NULL THEN
            PERFORM 1 FROM fila_jobs p WHERE p.id = v_prev AND p.xmin <> pg_current_xact_id()::xid FOR SHARE;
            PERFORM fila_wake_held(ARRAY[v_prev], TG_TABLE_SCHEMA);
        END IF;
    END IF;
    IF NEW.batch_id IS NOT NULL THEN
        SELECT b.sealed INTO v_sealed FROM fila_batches b WHERE b.id = NEW.batch_id FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'job % (kind %) names batch %, which does not exist', NEW.id, to_json(NEW.kind), NEW.batch_id
                USING ERRCODE = 'foreign_key_violation';
        ELSIF v_sealed THEN
            RAISE EXCEPTION 'job % (kind %) names batch %, which is sealed: no job joins it any more', NEW.id, to_json(NEW.kind), NEW.batch_id
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    f := fila_flow_check(NEW);
    IF f.state = 'waiting' THEN
        NEW.state := 'waiting';
    ELSIF f.state IN ('dead', 'cancelled') THEN
        NEW.state := f.state;
        NEW.finished_at := now();
        NEW.last_error := f.reason;
        NEW.errors := fila_append_error(NEW.errors, NEW.attempts, f.reason);
        IF NEW.batch_id IS NOT NULL THEN
            PERFORM fila_batch_count(NEW.batch_id, f.state);
        END IF;
    END IF;
    RETURN NEW;
END
$function$;

CREATE TRIGGER fila_jobs_flow_insert BEFORE INSERT ON fila_jobs
    FOR EACH ROW
    WHEN (((new.depends_on IS NOT NULL) OR (new.sequence_key IS NOT NULL) OR (new.batch_id IS NOT NULL)))
    EXECUTE FUNCTION fila_flow_insert();

CREATE OR REPLACE FUNCTION fila_notify_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now() + interval '10 minutes'
        GROUP BY queue
    LOOP
        -- Shared with every other producer; conflicts only with a worker
        -- recording its sleep, which waits for this transaction to end.
        PERFORM pg_advisory_xact_lock_shared(1718185058, hashtext(r.queue));
        IF EXISTS (SELECT 1 FROM fila_sleepers s WHERE s.queue IN (r.queue, '*')) THEN
            PERFORM pg_notify(CASE WHEN TG_TABLE_SCHEMA = 'public' THEN 'fila_' || r.queue
                                   ELSE left('fila:' || TG_TABLE_SCHEMA || ':' || r.queue, 63) END, r.id::text);
        END IF;
    END LOOP;
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_jobs_notify AFTER INSERT ON fila_jobs
    REFERENCING NEW TABLE AS fila_new_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION fila_notify_insert();

CREATE OR REPLACE FUNCTION fila_notify_update()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NEW.state = 'pending' AND NEW.run_at > now() + interval '10 minutes' THEN
        RETURN NULL;
    END IF;
    PERFORM fila_wake_queue(NEW.queue, NEW.id, TG_TABLE_SCHEMA);
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_jobs_notify_update AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN ((((new.state = 'pending'::text) AND ((old.state <> 'pending'::text) OR (old.run_at <> new.run_at))) OR ((old.state = 'running'::text) AND (new.state <> 'running'::text) AND (old.concurrency_key IS NOT NULL)) OR ((old.state = 'running'::text) AND (new.state <> 'running'::text) AND (old.unique_key IS NOT NULL) AND (NOT ('pending'::text = ANY (COALESCE(old.unique_states, '{pending,running}'::text[])))))))
    EXECUTE FUNCTION fila_notify_update();

CREATE OR REPLACE FUNCTION fila_payload_check()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    max_bytes bigint := TG_ARGV[0]::bigint;
    max_depth int := TG_ARGV[1]::int;
    bytes bigint := octet_length(NEW.payload::text);
BEGIN
    IF bytes > max_bytes THEN
        RAISE EXCEPTION 'payload of job % (kind %) is % bytes as JSON text: at most % are allowed', NEW.id, to_json(NEW.kind), bytes, max_bytes
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_payload_limits', TABLE = 'fila_jobs', COLUMN = 'payload',
                  HINT = 'Keep large data in a table or store of its own and put its key in the payload; fila_set_payload_limits(bytes, depth) sets the limits.';
    END IF;
    IF jsonb_path_exists(NEW.payload, ('strict $.**{' || max_depth || '} ? (@.type() == "array" || @.type() == "object")')::jsonpath) THEN
        RAISE EXCEPTION 'payload of job % (kind %) nests arrays and objects deeper than % levels', NEW.id, to_json(NEW.kind), max_depth
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_payload_limits', TABLE = 'fila_jobs', COLUMN = 'payload',
                  HINT = 'fila_set_payload_limits(bytes, depth) sets the limits.';
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_jobs_payload_limits AFTER INSERT OR UPDATE OF payload ON fila_jobs
    FOR EACH ROW
    WHEN ((pg_column_size(new.payload) > 8192))
    EXECUTE FUNCTION fila_payload_check('1048576', '64');

CREATE OR REPLACE FUNCTION fila_tags_metadata_check()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NEW.tags IS NOT NULL AND (cardinality(NEW.tags) > 32
        OR EXISTS (SELECT 1 FROM unnest(NEW.tags) t WHERE t IS NULL OR length(t) NOT BETWEEN 1 AND 100)) THEN
        RAISE EXCEPTION 'tags of job % (kind %): at most 32, each of 1 to 100 characters', NEW.id, to_json(NEW.kind)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_tags_metadata_valid', TABLE = 'fila_jobs', COLUMN = 'tags';
    END IF;
    IF NEW.metadata IS NOT NULL AND (jsonb_typeof(NEW.metadata) <> 'object' OR octet_length(NEW.metadata::text) > 16384) THEN
        RAISE EXCEPTION 'metadata of job % (kind %): a JSON object of at most 16384 bytes', NEW.id, to_json(NEW.kind)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_tags_metadata_valid', TABLE = 'fila_jobs', COLUMN = 'metadata';
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_jobs_tags_metadata_valid AFTER INSERT OR UPDATE OF tags, metadata ON fila_jobs
    FOR EACH ROW
    WHEN (((new.tags IS NOT NULL) OR (new.metadata IS NOT NULL)))
    EXECUTE FUNCTION fila_tags_metadata_check();

CREATE OR REPLACE FUNCTION fila_notify_resume()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify(CASE WHEN TG_TABLE_SCHEMA = 'public' THEN 'fila_' || NEW.queue
                           ELSE left('fila:' || TG_TABLE_SCHEMA || ':' || NEW.queue, 63) END, '');
    IF current_setting('wal_level') = 'logical' THEN
        PERFORM pg_logical_emit_message(true, CASE WHEN TG_TABLE_SCHEMA = 'public' THEN 'fila' ELSE 'fila:' || TG_TABLE_SCHEMA END, NEW.queue);
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER fila_queues_notify_resume AFTER UPDATE OF paused ON fila_queues
    FOR EACH ROW
    WHEN ((old.paused AND (NOT new.paused)))
    EXECUTE FUNCTION fila_notify_resume();
