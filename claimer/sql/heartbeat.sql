-- Extend the leases of attempts this worker still owns.
--
-- Rows: (id, kept). kept is false when the attempt is no longer this worker's
-- (rescued, or finished elsewhere): its handler must stop. A row locked by a
-- concurrent claim for a moment is skipped rather than waited for, and
-- reported kept: its lease is extended at the next heartbeat.
WITH d AS (
    SELECT * FROM unnest($1::bigint[], $2::int[]) AS d(id, attempt)
), locked AS (
    SELECT j.id FROM fila_jobs j
    WHERE j.id IN (SELECT id FROM d)
    FOR UPDATE SKIP LOCKED
), updated AS (
    UPDATE fila_jobs j
    SET lease_until = now() + make_interval(secs => $3::float8 / 1000)
    FROM d
    WHERE j.id = d.id AND j.id IN (SELECT id FROM locked)
      AND j.attempts = d.attempt AND j.state = 'running'
    RETURNING j.id
)
SELECT d.id, (u.id IS NOT NULL OR l.id IS NULL)
FROM d
LEFT JOIN updated u ON u.id = d.id
LEFT JOIN locked l ON l.id = d.id
