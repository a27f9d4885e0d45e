DROP FUNCTION IF EXISTS fila_claim(text, text[], int, float8, text[], text[], int[]);
DROP TABLE IF EXISTS fila_recurring;
DROP TRIGGER IF EXISTS fila_jobs_notify_update ON fila_jobs;
CREATE TRIGGER fila_jobs_notify_update
    AFTER UPDATE OF state, run_at ON fila_jobs
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.run_at <> NEW.run_at))
    EXECUTE FUNCTION fila_notify_update();
DROP INDEX IF EXISTS fila_jobs_concurrency_idx;
DROP INDEX IF EXISTS fila_jobs_unique_idx;
ALTER TABLE fila_jobs
    DROP COLUMN IF EXISTS concurrency_key,
    DROP COLUMN IF EXISTS unique_states,
    DROP COLUMN IF EXISTS unique_key;
DROP TRIGGER IF EXISTS fila_queues_notify_resume ON fila_queues;
DROP FUNCTION IF EXISTS fila_notify_resume();
DROP TABLE IF EXISTS fila_queues;

-- Version 2's claim and update trigger function, as 0002 made them.
CREATE OR REPLACE FUNCTION fila_notify_update() RETURNS trigger
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
