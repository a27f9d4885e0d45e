DROP INDEX fila_jobs_scheduled_idx;
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs (queue, run_at) WHERE state = 'pending';
