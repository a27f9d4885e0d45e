-- 0028: jobs inserted held. A held job is a row in state `held`, which no
-- claim selects: the claims, their index (pending rows only) and the sweep
-- are unchanged, so holding costs the hot path nothing. The insert trigger
-- notifies only for pending rows, so a held insert wakes nobody; a release
-- is an UPDATE to pending, which the update trigger announces like a retry.

ALTER TABLE fila_jobs DROP CONSTRAINT fila_jobs_state_valid;
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_state_valid
    CHECK (state = ANY (ARRAY['held', 'waiting', 'pending', 'running', 'completed', 'dead', 'cancelled']));

-- Listing, counting and releasing held jobs read only them.
CREATE INDEX fila_jobs_held_idx ON fila_jobs (queue) WHERE state = 'held';
