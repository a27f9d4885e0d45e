ALTER TABLE fila_jobs RESET (autovacuum_vacuum_cost_delay);
DROP FUNCTION IF EXISTS fila_sleep(text, text);
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
DROP TABLE IF EXISTS fila_sleepers;
