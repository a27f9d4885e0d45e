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
