-- Complete one attempt inside the caller's transaction, so the handler's
-- effect and the completion commit together or not at all.
UPDATE fila_jobs
SET state = 'completed', finished_at = now(), lease_until = NULL
WHERE id = $1::bigint AND attempts = $2::int AND state = 'running'
