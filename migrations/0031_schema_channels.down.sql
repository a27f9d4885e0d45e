-- 0031 down: the channels and logical messages of 0026, whatever the
-- schema.

CREATE FUNCTION fila_wake_held(p_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
DECLARE
    r record;
BEGIN
    -- The runnable jobs among p_ids that this transaction did not insert:
    -- the caller locks them, and a claim skips them until it commits.
    FOR r IN
        SELECT h.queue, min(h.id) AS id FROM fila_jobs h
        WHERE h.id = ANY (p_ids) AND h.xmin <> pg_current_xact_id()::xid
          AND h.state = 'pending' AND h.run_at <= now() + interval '10 minutes'
        GROUP BY h.queue
    LOOP
        PERFORM fila_wake_queue(r.queue, r.id);
    END LOOP;
END
$function$;

CREATE FUNCTION fila_wake_queue(p_queue text, p_id bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    sent text := coalesce(current_setting('fila.notified', true), '');
BEGIN
    -- Once per queue and transaction: every notification of a transaction
    -- is delivered at its commit, and one wakes the queue's workers.
    IF position(',' || p_queue || ',' IN sent) = 0 THEN
        PERFORM pg_notify('fila_' || p_queue, p_id::text);
        IF current_setting('wal_level') = 'logical' THEN
            PERFORM pg_logical_emit_message(true, 'fila', p_queue);
        END IF;
        PERFORM set_config('fila.notified', coalesce(nullif(sent, ''), ',') || p_queue || ',', true);
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION fila_flow_insert()
 RETURNS trigger
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
        -- A claim's SKIP LOCKED passes over the rows locked here until this
        -- transaction ends: wake their queues when it does (see
        -- fila_wake_held).
        PERFORM fila_wake_held(NEW.depends_on);
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
            PERFORM fila_wake_held(ARRAY[v_prev]);
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
$function$;

CREATE OR REPLACE FUNCTION fila_notify_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now() + interval '10 minutes'
        GROUP BY queue
    LOOP
        -- Shared with every other producer; conflicts only with a worker
        -- recording its sleep, which waits for this transaction to end.
        PERFORM pg_advisory_xact_lock_shared(1718185058, hashtext(r.queue));
        IF EXISTS (SELECT 1 FROM fila_sleepers s WHERE s.queue IN (r.queue, '*')) THEN
            PERFORM pg_notify('fila_' || r.queue, r.id::text);
        END IF;
    END LOOP;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION fila_notify_update()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NEW.state = 'pending' AND NEW.run_at > now() + interval '10 minutes' THEN
        RETURN NULL;
    END IF;
    PERFORM fila_wake_queue(NEW.queue, NEW.id);
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION fila_notify_resume()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('fila_' || NEW.queue, '');
    IF current_setting('wal_level') = 'logical' THEN
        PERFORM pg_logical_emit_message(true, 'fila', NEW.queue);
    END IF;
    RETURN NULL;
END
$function$;

DROP FUNCTION fila_wake_held(bigint[], text);
DROP FUNCTION fila_wake_queue(text, bigint, text);
