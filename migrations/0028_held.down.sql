-- 0028 down: no held state. A held job was meant not to run until
-- released: it is cancelled, with the reason, rather than let go.

UPDATE fila_jobs
SET state = 'cancelled', finished_at = now(),
    last_error = 'cancelled: held jobs were removed (migration 0028 rolled back) while it was held'
WHERE state = 'held';

DROP INDEX fila_jobs_held_idx;
ALTER TABLE fila_jobs DROP CONSTRAINT fila_jobs_state_valid;
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_state_valid
    CHECK (state = ANY (ARRAY['waiting', 'pending', 'running', 'completed', 'dead', 'cancelled']));
