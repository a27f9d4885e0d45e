DROP TABLE IF EXISTS fila_kinds;
DROP TRIGGER IF EXISTS fila_jobs_notify ON fila_jobs;
DROP FUNCTION IF EXISTS fila_notify_insert();
DROP TABLE IF EXISTS fila_jobs;
