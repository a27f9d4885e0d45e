-- Delete one small batch of completed jobs older than $1 seconds. Small
-- batches keep each transaction short; SKIP LOCKED lets several workers do it
-- at once without waiting on each other.
DELETE FROM fila_jobs
WHERE id IN (
    SELECT id FROM fila_jobs
    WHERE state = 'completed' AND finished_at < now() - make_interval(secs => $1::float8)
    ORDER BY finished_at
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED)
