-- Claim up to $2 runnable jobs of queue $1 for a lease of $3 milliseconds.
-- The same round trip rescues jobs whose lease expired (their worker died or
-- stalled) and, when the claim did not fill the batch, says in how many
-- milliseconds (on the database clock) the next scheduled job or lease comes
-- due, so an idle worker sets one timer instead of polling.
--
-- Rows: one per claimed job, then one summary row with a NULL id.
WITH rescued AS (
    UPDATE fila_jobs r
    SET state       = CASE WHEN r.attempts >= r.max_attempts THEN 'dead' ELSE 'pending' END,
        run_at      = now(),
        lease_until = NULL,
        finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
        last_error  = 'attempt ' || r.attempts || ': lease expired at ' || r.lease_until
                      || ' (the worker stopped heartbeating: crashed, killed or stalled)'
    WHERE r.id IN (
        SELECT id FROM fila_jobs
        WHERE state = 'running' AND lease_until < now()
        ORDER BY lease_until
        LIMIT 100
        FOR UPDATE SKIP LOCKED)
    RETURNING r.id
), claimed AS (
    UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => $3::float8 / 1000),
        started_at  = now()
    WHERE j.id IN (
        SELECT id FROM fila_jobs
        WHERE state = 'pending' AND queue = $1::text AND run_at <= now()
        ORDER BY priority, run_at, id
        LIMIT $2::int
        FOR UPDATE SKIP LOCKED)
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts, j.created_at, j.run_at
)
SELECT id, queue, kind, payload::text, priority, attempts, max_attempts, created_at, run_at,
       NULL::int AS rescued, NULL::float8 AS next_due_ms
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT count(*)::int FROM rescued),
       CASE WHEN (SELECT count(*) FROM claimed) < $2::int THEN
           extract(epoch FROM least(
               (SELECT min(run_at) FROM fila_jobs
                WHERE state = 'pending' AND queue = $1::text AND run_at > now()),
               (SELECT min(lease_until) FROM fila_jobs WHERE state = 'running')
           ) - clock_timestamp())::float8 * 1000
       END
