-- The SQL floor's completion: one fenced UPDATE for a whole claimed batch,
-- with nothing else around it (no skip-locked pass, no per-row outcome).
UPDATE fila_jobs j
SET state = 'completed', finished_at = now(), lease_until = NULL
FROM unnest($1::bigint[], $2::int[]) AS d(id, attempt)
WHERE j.id = d.id AND j.attempts = d.attempt AND j.state = 'running'
