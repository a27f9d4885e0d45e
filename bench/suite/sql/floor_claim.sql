-- The latency floor's claim: the simplest correct claim a NOTIFY-woken
-- worker can make. One row from the head of queue $1, leased for $2; run as
-- a named prepared statement, so it is parsed and planned once.
UPDATE fila_jobs
SET state = 'running', attempts = attempts + 1, lease_until = now() + $2::interval, started_at = now()
WHERE id = (
    SELECT id FROM fila_jobs
    WHERE state = 'pending' AND queue = $1::text AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING id
