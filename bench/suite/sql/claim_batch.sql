-- The SQL floor's claim: up to $2 rows from the head of queue $1, leased for
-- $3, with nothing else in the statement (no rescue of expired leases, no
-- next-due time). Run as a named prepared statement.
UPDATE fila_jobs
SET state = 'running', attempts = attempts + 1, lease_until = now() + $3::interval, started_at = now()
WHERE id IN (
    SELECT id FROM fila_jobs
    WHERE state = 'pending' AND queue = $1::text AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED)
RETURNING id, attempts
