-- 0023: job flows held by the database — dependencies (workflows),
-- sequences (one at a time per key, in insertion order) and batches with a
-- callback — so they hold across any number of processes and for jobs
-- inserted by plain SQL.
--
-- A job whose dependencies or sequence predecessor are not done is
-- `waiting`: the claims look only at pending jobs, so they are unchanged.
-- A job finishing (completed, dead or cancelled) re-examines the waiting
-- jobs that wait for it, under their row locks, and makes them pending
-- (the update trigger then wakes the workers), dead or cancelled.
--
-- Jobs without flows pay three NULL tests in the WHEN clauses of the
-- triggers below, nothing else.
--
-- The functions below look rows up by id, by the jobs they wait for or by
-- batch, once per job: as in the claim, each plans its statements once
-- per backend (force_generic_plan; planning `id = ANY (…)` anew for every
-- job of a workflow cost more than running it) and keeps the plan on the
-- indexes (enable_seqscan off) even when it was made while the table's
-- statistics said it was empty.

ALTER TABLE fila_jobs
    ADD COLUMN depends_on bigint[],
    ADD COLUMN dependency_failure text,
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN sequence_key text,
    ADD COLUMN sequence_prev bigint,
    ADD COLUMN sequence_on_dead text,
    ADD COLUMN batch_id bigint;

ALTER TABLE fila_jobs DROP CONSTRAINT fila_jobs_state_valid;
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_state_valid
    CHECK (state = ANY (ARRAY['waiting', 'pending', 'running', 'completed', 'dead', 'cancelled']));

-- A job depends only on jobs inserted before it (lower ids): no cycle can
-- be written, by any producer, and no later update can make one.
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_depends_earlier
    CHECK (depends_on IS NULL OR (cardinality(depends_on) >= 1 AND cardinality(depends_on) <= 1000 AND id > ALL (depends_on)));
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_dependency_failure_valid
    CHECK (dependency_failure IN ('dead', 'cancel', 'run'));
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_sequence_on_dead_valid
    CHECK (sequence_on_dead IN ('block', 'continue'));
ALTER TABLE fila_jobs ADD CONSTRAINT fila_jobs_sequence_key_valid
    CHECK (sequence_key <> '' AND length(sequence_key) <= 200);

-- The jobs that wait for a given job, found when it finishes (and shown
-- with it).
-- Without GIN's pending list: a lookup would read the whole list, and a
-- workflow's insert fills it with every job's entries at once.
CREATE INDEX fila_jobs_depends_idx ON fila_jobs USING gin (depends_on) WITH (fastupdate = off) WHERE depends_on IS NOT NULL;
CREATE INDEX fila_jobs_sequence_idx ON fila_jobs (sequence_prev) WHERE sequence_prev IS NOT NULL;
CREATE INDEX fila_jobs_batch_idx ON fila_jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX fila_jobs_waiting_idx ON fila_jobs (queue) WHERE state = 'waiting';

-- The last job of each sequence: the next one inserted waits for it. Its
-- row lock orders concurrent producers of one key.
CREATE TABLE fila_sequences (
    key text PRIMARY KEY,
    tail bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A batch counts its jobs' outcomes; sealing it fixes its size, and the
-- last outcome (or the seal, when every job already finished) inserts the
-- callback job once, under the batch row's lock.
CREATE TABLE fila_batches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sealed boolean NOT NULL DEFAULT false,
    total int NOT NULL DEFAULT 0,
    completed int NOT NULL DEFAULT 0,
    dead int NOT NULL DEFAULT 0,
    cancelled int NOT NULL DEFAULT 0,
    callback_kind text NOT NULL,
    callback_queue text NOT NULL DEFAULT 'default',
    callback_payload jsonb NOT NULL DEFAULT '{}',
    callback_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CONSTRAINT fila_batches_callback_valid CHECK (callback_kind <> '' AND length(callback_kind) <= 200
        AND callback_queue ~ '^[A-Za-z0-9_.-]{1,58}$' AND jsonb_typeof(callback_payload) = 'object'),
    CONSTRAINT fila_batches_callback_after_seal CHECK (sealed OR callback_id IS NULL)
);

-- What a job still waits for: ('waiting', why), ('pending', NULL) when it
-- may run, or ('dead' | 'cancelled', why) when a dependency failed and the
-- job's dependency_failure says so. A dependency or predecessor that no
-- longer exists (deleted by retention or by hand) holds nothing back.
CREATE FUNCTION fila_flow_check(j fila_jobs, OUT state text, OUT reason text)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_open   bigint;
    v_failed bigint;
    v_fstate text;
    v_prev   text;
BEGIN
    IF j.depends_on IS NOT NULL THEN
        SELECT min(d.id) FILTER (WHERE d.state NOT IN ('completed', 'dead', 'cancelled')),
               min(d.id) FILTER (WHERE d.state IN ('dead', 'cancelled'))
        INTO v_open, v_failed
        FROM fila_jobs d WHERE d.id = ANY (j.depends_on);
        IF v_failed IS NOT NULL AND coalesce(j.dependency_failure, 'dead') <> 'run' THEN
            SELECT d.state INTO v_fstate FROM fila_jobs d WHERE d.id = v_failed;
            state := CASE j.dependency_failure WHEN 'cancel' THEN 'cancelled' ELSE 'dead' END;
            reason := 'dependency ' || v_failed || ' ended ' || v_fstate;
            RETURN;
        END IF;
        IF v_open IS NOT NULL THEN
            state := 'waiting';
            reason := 'waits for dependency ' || v_open;
            RETURN;
        END IF;
    END IF;
    IF j.sequence_prev IS NOT NULL THEN
        SELECT p.state INTO v_prev FROM fila_jobs p WHERE p.id = j.sequence_prev;
        IF v_prev IN ('waiting', 'pending', 'running') THEN
            state := 'waiting';
            reason := 'waits for job ' || j.sequence_prev || ', before it in sequence ' || j.sequence_key;
            RETURN;
        END IF;
        IF v_prev = 'dead' AND coalesce(j.sequence_on_dead, 'block') = 'block' THEN
            state := 'waiting';
            reason := 'sequence ' || j.sequence_key || ' is blocked: job ' || j.sequence_prev
                      || ' before it is dead (retry or delete it to go on)';
            RETURN;
        END IF;
    END IF;
    state := 'pending';
END
$$;

-- Moves one waiting job, locked by the caller, to what fila_flow_check
-- says. Its own finish (dead, cancelled) goes on to its dependents through
-- fila_jobs_flow_finished.
CREATE FUNCTION fila_flow_advance(j fila_jobs) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    f record;
BEGIN
    f := fila_flow_check(j);
    IF f.state = 'pending' THEN
        UPDATE fila_jobs SET state = 'pending', run_at = greatest(run_at, now()) WHERE id = j.id;
    ELSIF f.state IN ('dead', 'cancelled') THEN
        UPDATE fila_jobs
        SET state = f.state, finished_at = now(), last_error = f.reason,
            errors = fila_append_error(errors, attempts, f.reason)
        WHERE id = j.id;
    END IF;
END
$$;

-- Counts one outcome of a batch's job, and inserts the callback when it
-- was the last.
CREATE FUNCTION fila_batch_count(p_batch bigint, p_state text) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    b fila_batches;
BEGIN
    UPDATE fila_batches
    SET completed = completed + (p_state = 'completed')::int,
        dead      = dead + (p_state = 'dead')::int,
        cancelled = cancelled + (p_state = 'cancelled')::int
    WHERE id = p_batch
    RETURNING * INTO b;
    IF FOUND AND b.sealed AND b.callback_id IS NULL AND b.completed + b.dead + b.cancelled >= b.total THEN
        UPDATE fila_batches SET callback_id = fila_batch_callback(b), finished_at = now() WHERE id = b.id;
    END IF;
END
$$;

-- Inserts a batch's callback job, its payload the batch's with the counts
-- by outcome under "batch".
CREATE FUNCTION fila_batch_callback(b fila_batches) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO fila_jobs (queue, kind, payload)
    VALUES (b.callback_queue, b.callback_kind, b.callback_payload || jsonb_build_object('batch', jsonb_build_object(
        'id', b.id, 'total', b.total, 'completed', b.completed, 'dead', b.dead, 'cancelled', b.cancelled)))
    RETURNING id
$$;

-- A new job with flows: checked, linked to what it waits for, and made
-- waiting (or dead, cancelled) as fila_flow_check says. It locks the jobs
-- it waits for (FOR SHARE): a finish of one of them in progress is waited
-- for and then seen, and one that comes after sees this job.
CREATE FUNCTION fila_flow_insert() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_bad    bigint;
    v_sealed boolean;
    v_prev   bigint;
    f        record;
BEGIN
    IF NEW.state <> 'pending' THEN
        RAISE EXCEPTION 'job % (kind %) has dependencies, a sequence or a batch: it must be inserted pending, not %',
            NEW.id, to_json(NEW.kind), NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.depends_on IS NOT NULL THEN
        -- Jobs this transaction inserted need no lock: no other can see
        -- them, let alone finish them (and locking them again and again,
        -- as a workflow's jobs do, costs more with each).
        PERFORM 1 FROM fila_jobs d
        WHERE d.id = ANY (NEW.depends_on) AND d.xmin <> pg_current_xact_id()::xid
        ORDER BY d.id FOR SHARE;
        -- Counted by the primary key first; the search for the missing id
        -- (whose plan hashes the whole table) runs only when one is.
        IF array_position(NEW.depends_on, NULL) IS NOT NULL
           OR (SELECT count(*) FROM fila_jobs x WHERE x.id = ANY (NEW.depends_on))
              < (SELECT count(DISTINCT d) FROM unnest(NEW.depends_on) d) THEN
            SELECT d INTO v_bad FROM unnest(NEW.depends_on) d
            WHERE d IS NULL OR NOT EXISTS (SELECT 1 FROM fila_jobs x WHERE x.id = d) LIMIT 1;
            RAISE EXCEPTION 'job % (kind %) depends on job %, which does not exist', NEW.id, to_json(NEW.kind), coalesce(v_bad::text, 'NULL')
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        SELECT d INTO v_bad FROM unnest(NEW.depends_on) d WHERE d >= NEW.id LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job % (kind %) depends on job %, which was not inserted before it: a job depends only on jobs with lower ids',
                NEW.id, to_json(NEW.kind), v_bad USING ERRCODE = 'check_violation';
        END IF;
        UPDATE fila_jobs SET has_dependents = true WHERE id = ANY (NEW.depends_on) AND NOT has_dependents;
    END IF;
    IF NEW.sequence_key IS NOT NULL THEN
        LOOP
            SELECT s.tail INTO v_prev FROM fila_sequences s WHERE s.key = NEW.sequence_key FOR UPDATE;
            IF FOUND THEN
                UPDATE fila_sequences SET tail = NEW.id, updated_at = now() WHERE key = NEW.sequence_key;
                EXIT;
            END IF;
            INSERT INTO fila_sequences (key, tail) VALUES (NEW.sequence_key, NEW.id) ON CONFLICT (key) DO NOTHING;
            IF FOUND THEN
                v_prev := NULL;
                EXIT;
            END IF;
        END LOOP;
        NEW.sequence_prev := v_prev;
        IF v_prev IS NOT NULL THEN
            PERFORM 1 FROM fila_jobs p WHERE p.id = v_prev AND p.xmin <> pg_current_xact_id()::xid FOR SHARE;
        END IF;
    END IF;
    IF NEW.batch_id IS NOT NULL THEN
        SELECT b.sealed INTO v_sealed FROM fila_batches b WHERE b.id = NEW.batch_id FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'job % (kind %) names batch %, which does not exist', NEW.id, to_json(NEW.kind), NEW.batch_id
                USING ERRCODE = 'foreign_key_violation';
        ELSIF v_sealed THEN
            RAISE EXCEPTION 'job % (kind %) names batch %, which is sealed: no job joins it any more', NEW.id, to_json(NEW.kind), NEW.batch_id
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    f := fila_flow_check(NEW);
    IF f.state = 'waiting' THEN
        NEW.state := 'waiting';
    ELSIF f.state IN ('dead', 'cancelled') THEN
        NEW.state := f.state;
        NEW.finished_at := now();
        NEW.last_error := f.reason;
        NEW.errors := fila_append_error(NEW.errors, NEW.attempts, f.reason);
        IF NEW.batch_id IS NOT NULL THEN
            PERFORM fila_batch_count(NEW.batch_id, f.state);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER fila_jobs_flow_insert BEFORE INSERT ON fila_jobs
    FOR EACH ROW
    WHEN (NEW.depends_on IS NOT NULL OR NEW.sequence_key IS NOT NULL OR NEW.batch_id IS NOT NULL)
    EXECUTE FUNCTION fila_flow_insert();

-- A job with flows finished: the waiting jobs that wait for it are
-- re-examined under their row locks, taken in id order, so two concurrent
-- finishes cannot both miss the last one (the second waits for the first
-- to commit, then sees it) nor both promote. A dead or cancelled job makes
-- its dependents dead or cancelled in turn, through this same trigger.
CREATE FUNCTION fila_flow_finished() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    r fila_jobs;
    c fila_jobs;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    IF r.has_dependents THEN
        FOR c IN SELECT j.* FROM fila_jobs j WHERE j.depends_on @> ARRAY[r.id] AND j.state = 'waiting'
                 ORDER BY j.id FOR NO KEY UPDATE LOOP
            PERFORM fila_flow_advance(c);
        END LOOP;
    END IF;
    IF r.sequence_key IS NOT NULL THEN
        FOR c IN SELECT j.* FROM fila_jobs j WHERE j.sequence_prev = r.id AND j.state = 'waiting'
                 ORDER BY j.id FOR NO KEY UPDATE LOOP
            PERFORM fila_flow_advance(c);
        END LOOP;
    END IF;
    IF r.batch_id IS NOT NULL AND (TG_OP = 'UPDATE' OR OLD.state IN ('waiting', 'pending', 'running')) THEN
        -- A job deleted before it finished counts as cancelled.
        PERFORM fila_batch_count(r.batch_id, CASE WHEN TG_OP = 'UPDATE' THEN r.state ELSE 'cancelled' END);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER fila_jobs_flow_finished AFTER UPDATE OF state ON fila_jobs
    FOR EACH ROW
    WHEN (OLD.state IN ('waiting', 'pending', 'running') AND NEW.state IN ('completed', 'dead', 'cancelled')
          AND (NEW.has_dependents OR NEW.sequence_key IS NOT NULL OR NEW.batch_id IS NOT NULL))
    EXECUTE FUNCTION fila_flow_finished();

-- A job with flows deleted: what waited for it goes on.
CREATE TRIGGER fila_jobs_flow_deleted AFTER DELETE ON fila_jobs
    FOR EACH ROW
    WHEN (OLD.has_dependents OR OLD.sequence_key IS NOT NULL OR OLD.batch_id IS NOT NULL)
    EXECUTE FUNCTION fila_flow_finished();

-- Sealing a batch fixes its size to the jobs that joined it, and inserts
-- the callback at once when they all finished already.
CREATE FUNCTION fila_batch_seal() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
BEGIN
    NEW.total := (SELECT count(*) FROM fila_jobs j WHERE j.batch_id = NEW.id);
    IF NEW.callback_id IS NULL AND NEW.completed + NEW.dead + NEW.cancelled >= NEW.total THEN
        NEW.callback_id := fila_batch_callback(NEW);
        NEW.finished_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER fila_batches_seal BEFORE UPDATE OF sealed ON fila_batches
    FOR EACH ROW
    WHEN (NEW.sealed AND NOT OLD.sealed)
    EXECUTE FUNCTION fila_batch_seal();
