-- Record the outcome of many attempts at once. Each row is fenced on
-- (id, attempt, running): a worker whose lease was rescued cannot overwrite
-- the new owner's result.
--
-- ok        → completed
-- permanent → dead at once
-- otherwise → pending again at now() + delay, or dead when attempts are spent
--
-- Rows are locked with SKIP LOCKED first: a concurrent claim may hold a row
-- lock for a moment on a row it saw as pending just before this worker
-- claimed it, and waiting for that would put sessions in lock waits. Such a
-- row comes back as 'skipped' and is written again a moment later.
--
-- Rows: one per outcome: (id, state, due in ms) where state is the new state,
-- 'fenced' (no longer this worker's attempt) or 'skipped' (locked just now).
WITH d AS (
    SELECT *
    FROM unnest($1::bigint[], $2::int[], $3::bool[], $4::text[], $5::float8[], $6::bool[])
         AS d(id, attempt, ok, err, delay_ms, permanent)
), locked AS (
    SELECT j.id FROM fila_jobs j
    WHERE j.id IN (SELECT id FROM d)
    FOR UPDATE SKIP LOCKED
), updated AS (
    UPDATE fila_jobs j
    SET state = CASE
            WHEN d.ok THEN 'completed'
            WHEN d.permanent OR j.attempts >= j.max_attempts THEN 'dead'
            ELSE 'pending' END,
        run_at = CASE
            WHEN NOT d.ok AND NOT d.permanent AND j.attempts < j.max_attempts
            THEN now() + make_interval(secs => d.delay_ms / 1000)
            ELSE j.run_at END,
        finished_at = CASE
            WHEN d.ok OR d.permanent OR j.attempts >= j.max_attempts THEN now() END,
        lease_until = NULL,
        last_error  = CASE WHEN d.ok THEN j.last_error ELSE d.err END
    FROM d
    WHERE j.id = d.id AND j.id IN (SELECT id FROM locked)
      AND j.attempts = d.attempt AND j.state = 'running'
    RETURNING j.id, j.state, extract(epoch FROM j.run_at - now())::float8 * 1000 AS due_ms
)
SELECT d.id,
       coalesce(u.state, CASE WHEN l.id IS NULL THEN 'skipped' ELSE 'fenced' END),
       coalesce(u.due_ms, 0)
FROM d
LEFT JOIN updated u ON u.id = d.id
LEFT JOIN locked l ON l.id = d.id
