-- 0002: rules the table enforces for every writer (workers, tools, plain SQL),
-- kinds known per queue, workers visible to operators, wake-ups for jobs that
-- become pending by UPDATE or are scheduled ahead, each attempt's error kept,
-- and the hot statements as functions whose plans each backend caches.

-- Repair rows the new rules would refuse, so this migration applies to a live
-- table. Each repair keeps the job and says nothing false about it.
UPDATE fila_jobs SET attempts = 0 WHERE attempts < 0;
-- It ran that many times: the limit moves up to the truth.
UPDATE fila_jobs SET max_attempts = attempts WHERE attempts > max_attempts;
-- A pending job with no attempt left would run past its limit: give it one.
UPDATE fila_jobs SET max_attempts = attempts + 1
WHERE state = 'pending' AND attempts >= max_attempts AND attempts < 1000;
UPDATE fila_jobs SET state = 'dead', finished_at = now(),
    last_error = coalesce(last_error || '; ', '') || 'no attempt left when migration 0002 added the rule'
WHERE state = 'pending' AND attempts >= max_attempts;
-- A running job without a lease would never be rescued: its lease ends now.
UPDATE fila_jobs SET lease_until = now() WHERE state = 'running' AND lease_until IS NULL;
UPDATE fila_jobs SET finished_at = now()
WHERE state IN ('completed', 'dead', 'cancelled') AND finished_at IS NULL;

ALTER TABLE fila_jobs
    ADD CONSTRAINT fila_jobs_running_needs_lease
        CHECK (state <> 'running' OR lease_until IS NOT NULL),
    ADD CONSTRAINT fila_jobs_attempts_in_bounds
        CHECK (attempts >= 0 AND attempts <= max_attempts),
    ADD CONSTRAINT fila_jobs_pending_needs_attempt_left
        CHECK (state <> 'pending' OR attempts < max_attempts),
    ADD CONSTRAINT fila_jobs_finished_needs_time
        CHECK (state NOT IN ('completed', 'dead', 'cancelled') OR finished_at IS NOT NULL),
    -- Each failed attempt's error, oldest first, the last 20 kept:
    -- [{"attempt": 1, "at": "…", "error": "…"}, …]. last_error stays the
    -- latest one.
    ADD COLUMN errors jsonb NOT NULL DEFAULT '[]';

-- The next scheduled job of a queue, for the timer an idle worker sets: one
-- index descent per queue, whatever other queues hold.
DROP INDEX fila_jobs_scheduled_idx;
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs (queue, run_at) WHERE state = 'pending';

-- Dead jobs per kind (what operators alert on) and their retention; cancelled
-- jobs' retention.
CREATE INDEX fila_jobs_dead_idx ON fila_jobs (kind, finished_at) WHERE state = 'dead';
CREATE INDEX fila_jobs_cancelled_idx ON fila_jobs (finished_at) WHERE state = 'cancelled';

-- A kind is known per queue: `fila enqueue` refuses a kind that no worker of
-- the job's queue handles.
ALTER TABLE fila_kinds DROP CONSTRAINT fila_kinds_pkey;
ALTER TABLE fila_kinds ADD PRIMARY KEY (queue, kind);

-- One row per running worker process, so `fila stats` can show what each one
-- is doing: its queues, kinds, mode, and whether its wake source is up (and
-- why not). Written at start, when the wake source changes and every few
-- minutes; deleted at a clean stop; rows of workers gone for an hour are
-- removed by any worker's maintenance.
CREATE TABLE fila_workers (
    id           text PRIMARY KEY,
    host         text        NOT NULL,
    pid          int         NOT NULL,
    queues       text[]      NOT NULL,
    kinds        text[]      NOT NULL,
    mode         text        NOT NULL,
    wake_source  text        NOT NULL CHECK (wake_source IN ('up', 'down', 'none')),
    wake_error   text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Inserts notify once per statement per queue, carrying one job id, for
-- every pending row due within the longest safety poll: an idle worker woken
-- by a job scheduled a few seconds ahead finds nothing to claim yet, but
-- learns when the job comes due and sets its timer. Jobs further ahead are
-- learned by the safety poll in time.
CREATE OR REPLACE FUNCTION fila_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now() + interval '10 minutes'
        GROUP BY queue
    LOOP
        PERFORM pg_notify('fila_' || r.queue, r.id::text);
    END LOOP;
    RETURN NULL;
END
$$;


-- A row that becomes pending by UPDATE (a retry, a rescue, a release, an
-- operator's hand edit) wakes the queue's workers like an insert does. The
-- WHEN clause runs in C for every updated row; the function only for rows
-- that became pending, and it notifies once per queue per transaction, so a
-- 100 000-row UPDATE does not queue 100 000 notifications.
--
-- Workers in WAL mode read no notifications: a transactional logical
-- message, streamed to them by pgoutput, tells them of rows that became
-- pending by UPDATE. Emitted only where logical decoding is possible.
CREATE FUNCTION fila_notify_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    sent text := coalesce(current_setting('fila.notified', true), '');
BEGIN
    IF NEW.run_at > now() + interval '10 minutes' THEN
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

CREATE TRIGGER fila_jobs_notify_update
    AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.run_at <> NEW.run_at))
    EXECUTE FUNCTION fila_notify_update();

-- errors with one more failed attempt appended, the oldest dropped past 20.
CREATE FUNCTION fila_append_error(errors jsonb, attempt int, err text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END
           || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(), 'error', err))
$$;

-- The hot statements are functions: PL/pgSQL caches each statement's plan in
-- the backend, so a call costs the parse and plan of a one-line SELECT,
-- whether the caller's connection keeps prepared statements or goes through
-- PgBouncer in transaction mode, which does not.
--
-- An attempt is (id, attempt, started_at): attempts counts the attempts that
-- were used, and started_at tells apart two claims with the same count (an
-- interrupted attempt is not counted, and an operator's retry resets the
-- count). Every write after the claim is fenced on all three and on state
-- 'running', so a worker whose lease was rescued cannot touch the new
-- owner's attempt.

-- fila_claim claims up to p_limit runnable jobs of p_queue whose kind is in
-- p_kinds, for a lease of p_lease_ms. In the same call it rescues up to 100
-- jobs whose lease expired (back to pending, or dead with no attempt left),
-- and, when the batch is not full, says in how many milliseconds the next
-- job of the queue or the next lease comes due, on the database clock.
--
-- Rows: one per claimed job (wait_ms: from the later of created_at and run_at
-- to this claim), then one summary row with a NULL id.
--
-- The claim walks the queue one priority at a time: within a priority the
-- pending index is ordered by run_at, so the scan stops at the first job
-- scheduled for later, however many are.
CREATE FUNCTION fila_claim(p_queue text, p_kinds text[], p_limit int, p_lease_ms float8)
RETURNS TABLE (id bigint, kind text, payload text, priority smallint, attempt int, max_attempts int,
               created_at timestamptz, started_at timestamptz, wait_ms float8,
               rescued int, next_due_ms float8)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_left  int := p_limit;
    v_prio  smallint;
    v_n     int;
    v_lease interval := make_interval(secs => p_lease_ms / 1000);
BEGIN
    WITH r AS (
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
        RETURNING 1)
    SELECT count(*)::int INTO rescued FROM r;

    SELECT min(x.priority) INTO v_prio FROM fila_jobs x WHERE x.state = 'pending' AND x.queue = p_queue;
    WHILE v_prio IS NOT NULL AND v_left > 0 LOOP
        RETURN QUERY
        WITH c AS (
            UPDATE fila_jobs j
            SET state       = 'running',
                attempts    = j.attempts + 1,
                lease_until = now() + v_lease,
                started_at  = now()
            WHERE j.id IN (
                SELECT x.id FROM fila_jobs x
                WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority = v_prio
                  AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                ORDER BY x.run_at, x.id
                LIMIT v_left
                FOR UPDATE SKIP LOCKED)
            RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
                      j.created_at, j.started_at,
                      (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8)
        SELECT c.*, NULL::int, NULL::float8 FROM c;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_left := v_left - v_n;
        EXIT WHEN v_left <= 0;
        SELECT min(x.priority) INTO v_prio FROM fila_jobs x
        WHERE x.state = 'pending' AND x.queue = p_queue AND x.priority > v_prio;
    END LOOP;

    IF v_left > 0 THEN
        next_due_ms := (extract(epoch FROM least(
            (SELECT min(x.run_at) FROM fila_jobs x
             WHERE x.state = 'pending' AND x.queue = p_queue AND x.run_at > now() AND x.kind = ANY (p_kinds)),
            (SELECT min(x.lease_until) FROM fila_jobs x WHERE x.state = 'running')
        ) - clock_timestamp()) * 1000)::float8;
    END IF;
    id := NULL; kind := NULL; payload := NULL; priority := NULL; attempt := NULL; max_attempts := NULL;
    created_at := NULL; started_at := NULL; wait_ms := NULL;
    RETURN NEXT;
END
$$;

-- fila_finish writes the outcomes of many attempts in one statement:
-- ok → completed; permanent → dead; otherwise pending again at now() +
-- delay, or dead with no attempt left. A failure's error is kept in
-- last_error and appended to errors.
--
-- Rows are locked with SKIP LOCKED: a concurrent claim may hold a row for a
-- moment, and waiting for it would put sessions in lock waits. Such a row
-- comes back 'skipped' and is written again shortly.
--
-- Rows: (id, attempt, started_at, state) per outcome, where state is the new state,
-- 'fenced' (no longer this attempt: rescued, cancelled, finished) or
-- 'skipped'; due_ms says when a retry runs.
CREATE FUNCTION fila_finish(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_ok bool[],
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

-- fila_heartbeat extends the leases of attempts this worker still owns.
--
-- Rows: (id, attempt, started_at, status): 'kept'; 'cancelled' when an operator
-- cancelled the job (its handler must stop); 'lost' when the attempt is no
-- longer this worker's (rescued, finished, deleted); 'busy' when the row was
-- locked for a moment by another statement (its lease is extended next
-- time).
CREATE FUNCTION fila_heartbeat(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_lease_ms float8)
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

-- fila_release gives attempts this worker will not finish (it is stopping)
-- back to the queue at once instead of after their leases. The interrupted
-- attempt is not counted: the job keeps its full number of attempts. The
-- update trigger wakes the queue's workers.
--
-- Returns how many attempts were released.
CREATE FUNCTION fila_release(p_ids bigint[], p_attempts int[], p_started timestamptz[], p_reason text)
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
