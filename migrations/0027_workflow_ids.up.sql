-- 0027: a workflow has an id, and each of its jobs its step's name.
--
-- Every job of one InsertWorkflow carries the same workflow_id, the id of
-- the workflow's first job (its lowest: ids are never reused, so neither
-- are workflow ids, and no sequence of their own is needed), and its step's
-- name, so that a workflow can be listed, cancelled and retried as a unit,
-- and a step can read its dependencies' outputs by name. Jobs outside
-- workflows leave both NULL: the claim, its plan and its index are
-- unchanged, and the partial index below holds no entry for them.

ALTER TABLE fila_jobs
    ADD COLUMN workflow_id bigint,
    ADD COLUMN workflow_step text;

ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_workflow_step_valid
    CHECK (workflow_step IS NULL OR (workflow_id IS NOT NULL AND workflow_step <> '' AND length(workflow_step) <= 200));

-- A workflow's jobs, found by its id; a step's name is unique within its
-- workflow (a job of no step, written by hand, may be any number of them).
CREATE UNIQUE INDEX fila_jobs_workflow_idx ON fila_jobs (workflow_id, workflow_step) WHERE workflow_id IS NOT NULL;

-- Retries a workflow as a unit: its dead and cancelled jobs run again, each
-- once the jobs it waits for have completed; its completed jobs stay as
-- they are. Rows: (job id, state before, state after), in id order.
--
-- The failed jobs are locked (FOR UPDATE), and the jobs they wait for
-- (FOR SHARE), as fila_flow_insert locks them: a dependency finishing
-- meanwhile is waited for and then seen, and one finishing after sees its
-- dependents waiting. Each failed job becomes pending when it waits for
-- nothing, else waiting; then each waiting one is examined again, in id
-- order, as a finish examines it: pending when all it waits for completed,
-- or dead (cancelled) again when a dependency outside the retry is still
-- dead. Each is read afresh before it is examined: examining one may have
-- finished the next through fila_jobs_flow_finished.
CREATE FUNCTION fila_workflow_retry(p_workflow bigint, OUT o_id bigint, OUT o_from text, OUT o_to text)
RETURNS SETOF record
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_ids  bigint[];
    v_from text[];
    v_id   bigint;
    r      record;
    c      fila_jobs;
BEGIN
    FOR r IN SELECT j.id, j.state FROM fila_jobs j
             WHERE j.workflow_id = p_workflow AND j.state IN ('dead', 'cancelled')
             ORDER BY j.id FOR UPDATE LOOP
        v_ids := v_ids || r.id;
        v_from := v_from || r.state;
    END LOOP;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM fila_jobs d
    WHERE d.id IN (SELECT unnest(x.depends_on) FROM fila_jobs x WHERE x.id = ANY (v_ids))
      AND d.id <> ALL (v_ids)
    ORDER BY d.id FOR SHARE;
    -- As a retry of one job: attempts from 0, the error history kept, and
    -- a job cancelled while it ran due only once that attempt's lease ends.
    UPDATE fila_jobs j
    SET state = CASE WHEN j.depends_on IS NULL AND j.sequence_prev IS NULL THEN 'pending' ELSE 'waiting' END,
        run_at = greatest(now(), j.lease_until), attempts = 0, lease_until = NULL, finished_at = NULL
    WHERE j.id = ANY (v_ids);
    FOREACH v_id IN ARRAY v_ids LOOP
        SELECT * INTO c FROM fila_jobs j WHERE j.id = v_id;
        IF c.state = 'waiting' THEN
            PERFORM fila_flow_advance(c);
        END IF;
    END LOOP;
    RETURN QUERY
        SELECT f.id, f.from_state, j.state
        FROM unnest(v_ids, v_from) AS f(id, from_state)
        JOIN fila_jobs j ON j.id = f.id
        ORDER BY f.id;
END
$$;
