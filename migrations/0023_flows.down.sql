-- 0023 down: no flows. Waiting jobs have nothing left to wait for them:
-- they are cancelled, with the reason.

DROP TRIGGER fila_batches_seal ON fila_batches;
DROP TRIGGER fila_jobs_flow_deleted ON fila_jobs;
DROP TRIGGER fila_jobs_flow_finished ON fila_jobs;
DROP TRIGGER fila_jobs_flow_insert ON fila_jobs;
DROP FUNCTION fila_batch_seal();
DROP FUNCTION fila_flow_finished();
DROP FUNCTION fila_flow_insert();
DROP FUNCTION fila_batch_count(bigint, text);
DROP FUNCTION fila_batch_callback(fila_batches);
DROP FUNCTION fila_flow_advance(fila_jobs);
DROP FUNCTION fila_flow_check(fila_jobs);
DROP TABLE fila_batches;
DROP TABLE fila_sequences;

UPDATE fila_jobs
SET state = 'cancelled', finished_at = now(),
    last_error = 'cancelled: job flows were removed (migration 0023 rolled back) while it waited'
WHERE state = 'waiting';

ALTER TABLE fila_jobs DROP CONSTRAINT fila_jobs_state_valid;
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_state_valid
    CHECK (state = ANY (ARRAY['pending', 'running', 'completed', 'dead', 'cancelled']));

DROP INDEX fila_jobs_waiting_idx;
ALTER TABLE fila_jobs
    DROP COLUMN depends_on,
    DROP COLUMN dependency_failure,
    DROP COLUMN has_dependents,
    DROP COLUMN sequence_key,
    DROP COLUMN sequence_prev,
    DROP COLUMN sequence_on_dead,
    DROP COLUMN batch_id;
