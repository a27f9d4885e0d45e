DROP FUNCTION IF EXISTS fila_release(bigint[], int[], timestamptz[], text);
DROP FUNCTION IF EXISTS fila_heartbeat(bigint[], int[], timestamptz[], float8);
DROP FUNCTION IF EXISTS fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[]);
DROP FUNCTION IF EXISTS fila_claim(text, text[], int, float8);
DROP TRIGGER IF EXISTS fila_jobs_notify_update ON fila_jobs;
DROP FUNCTION IF EXISTS fila_notify_update();
DROP FUNCTION IF EXISTS fila_append_error(jsonb, int, text);
DROP TABLE IF EXISTS fila_workers;
ALTER TABLE fila_kinds DROP CONSTRAINT fila_kinds_pkey;
DELETE FROM fila_kinds a USING fila_kinds b
WHERE a.kind = b.kind AND (a.last_seen_at, a.queue) < (b.last_seen_at, b.queue);
ALTER TABLE fila_kinds ADD PRIMARY KEY (kind);
DROP INDEX IF EXISTS fila_jobs_cancelled_idx;
DROP INDEX IF EXISTS fila_jobs_dead_idx;
DROP INDEX IF EXISTS fila_jobs_scheduled_idx;
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs (run_at) WHERE state = 'pending';
ALTER TABLE fila_jobs
    DROP COLUMN IF EXISTS errors,
    DROP CONSTRAINT IF EXISTS fila_jobs_finished_needs_time,
    DROP CONSTRAINT IF EXISTS fila_jobs_pending_needs_attempt_left,
    DROP CONSTRAINT IF EXISTS fila_jobs_attempts_in_bounds,
    DROP CONSTRAINT IF EXISTS fila_jobs_running_needs_lease;
-- fila_notify_insert as 0001 created it: only rows runnable now.
CREATE OR REPLACE FUNCTION fila_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now()
        GROUP BY queue
    LOOP
        PERFORM pg_notify('fila_' || r.queue, r.id::text);
    END LOOP;
    RETURN NULL;
END
$$;
