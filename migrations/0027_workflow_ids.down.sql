-- 0027 down: workflows without ids.

DROP FUNCTION fila_workflow_retry(bigint);
DROP INDEX fila_jobs_workflow_idx;
ALTER TABLE fila_jobs DROP CONSTRAINT fila_jobs_workflow_step_valid;
ALTER TABLE fila_jobs DROP COLUMN workflow_step, DROP COLUMN workflow_id;
