-- 0012: claim the job a notification names.
--
-- The insert trigger's notification carries the id of the queue's first
-- new job (0005). A worker that sleeps on a queue, having found it empty,
-- is told of one job at a time while jobs come slowly: it claims that job
-- by its id with this statement, a primary-key probe, before it looks for
-- more with fila_claim. fila_claim reads the queue's priorities, rescues
-- expired leases and reads the next due time; all of that follows the
-- claim by id instead of preceding it. From Go, one job, p50 of 300 each,
-- interleaved, three runs: fila_claim 0.57-0.73 ms, this 0.43-0.53 ms, the
-- bench floor's bare UPDATE ... SKIP LOCKED 0.38-0.45 ms.
--
-- The job is claimed only if it is still pending and runnable, in the
-- caller's queue, of one of the caller's kinds (kinds without a
-- concurrency limit: limited ones go through fila_claim's slot checks), and
-- its queue is not paused. Anything else returns no row, and the caller
-- claims from the head of the queue as usual.
CREATE FUNCTION fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms float8)
RETURNS TABLE (id bigint, kind text, payload text, priority smallint, attempt int, max_attempts int,
               created_at timestamptz, started_at timestamptz, wait_ms float8)
LANGUAGE plpgsql
SET jit = off SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => p_lease_ms / 1000),
        started_at  = now()
    WHERE j.id = (SELECT x.id FROM fila_jobs x
                  WHERE x.id = p_id AND x.state = 'pending' AND x.queue = p_queue
                    AND x.run_at <= now() AND x.kind = ANY (p_kinds)
                    AND NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = p_queue AND q.paused)
                  FOR UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8;
END
$$;
