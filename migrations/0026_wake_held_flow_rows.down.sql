-- 0026 down: flows' inserts notify nobody; the update trigger notifies by
-- itself.

CREATE OR REPLACE FUNCTION fila_notify_update()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    sent text := coalesce(current_setting('fila.notified', true), '');
BEGIN
    IF NEW.state = 'pending' AND NEW.run_at > now() + interval '10 minutes' THEN
        RETURN NULL;
    END IF;
    IF position(',' || NEW.queue || ',' IN sent) = 0 THEN
        PERFORM pg_notify('fila_' || NEW.queue, NEW.id::text);
        IF current_setting('wal_level') = 'logical' THEN
            PERFORM pg_logical_emit_message(true, 'fila', NEW.queue);
        END IF;
        PERFORM set_config('fila.notified', coalesce(nullif(sent, ''), ',') || NEW.queue || ',', true);
    END IF;
    RETURN NULL;
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
$function$;

DROP FUNCTION fila_wake_held(bigint[]);
DROP FUNCTION fila_wake_queue(text, bigint);
