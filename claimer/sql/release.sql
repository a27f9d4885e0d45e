-- Give attempts this worker will not finish (it is shutting down) back to the
-- queue at once instead of waiting for their leases, and wake the other
-- workers of each queue. The attempt number is kept: it is the fencing key.
WITH released AS (
    UPDATE fila_jobs j
    SET state = 'pending', run_at = now(), lease_until = NULL, last_error = $3::text
    FROM unnest($1::bigint[], $2::int[]) AS d(id, attempt)
    WHERE j.id = d.id AND j.attempts = d.attempt AND j.state = 'running'
    RETURNING j.id, j.queue
), woken AS (
    SELECT pg_notify('fila_' || queue, min(id)::text) FROM released GROUP BY queue
)
SELECT (SELECT count(*)::int FROM released), (SELECT count(*)::int FROM woken)
