-- 0017: the table bounds the size and the nesting depth of a payload.
--
-- A plain INSERT is a first-class way to enqueue, so the limits the Go API
-- and `fila enqueue` check before sending are the table's own too: a
-- 20 KB array nested 9 999 deep printed into a 200 MB dashboard page, and
-- nothing stopped a payload of hundreds of megabytes that every worker,
-- page and command then reads whole.
--
-- The size is the payload's JSON text as PostgreSQL prints it
-- (octet_length(payload::text)): what workers, handlers and the commands
-- receive. Printing a payload costs about 30 ns a byte, too much for every
-- insert, so the trigger's WHEN clause first compares the stored size,
-- which the row already carries: text is at most about 84 times as long as
-- the jsonb it comes from (a number such as -1e-1000, 12 bytes stored,
-- prints 1 003 characters), so a payload stored in at most max_bytes / 128
-- bytes cannot be too long, and is not looked at again. A larger one is
-- printed and measured, and its depth checked, by fila_payload_check. In
-- an AFTER trigger, NEW is the row as inserted, before TOAST compression;
-- and an AFTER trigger leaves COPY its batched inserts, which a BEFORE
-- trigger would turn into one insert per row.
--
-- The depth is therefore checked for the payloads past that size only
-- (8 KiB at the defaults): a smaller payload cannot nest deeper than one
-- level per 8 stored bytes, 1 024 levels, and the Go API and `fila
-- enqueue` check every payload's depth before sending it. Checking every
-- payload's depth in the table would cost about 10 µs for a payload of
-- 300 bytes (jsonpath), more than the insert itself.
--
-- Only an INSERT and an UPDATE that sets payload fire the trigger: claims,
-- heartbeats and outcomes never do, so a row written before this
-- migration, or before the limits were lowered, is still claimed, run,
-- retried and shown.
--
-- The limits are the trigger's arguments: fila_set_payload_limits replaces
-- the trigger, and fila_payload_limits reads them back.
CREATE FUNCTION fila_payload_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    max_bytes bigint := TG_ARGV[0]::bigint;
    max_depth int := TG_ARGV[1]::int;
    bytes bigint := octet_length(NEW.payload::text);
BEGIN
    IF bytes > max_bytes THEN
        RAISE EXCEPTION 'payload of job % (kind %) is % bytes as JSON text: at most % are allowed', NEW.id, to_json(NEW.kind), bytes, max_bytes
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_payload_limits', TABLE = 'fila_jobs', COLUMN = 'payload',
                  HINT = 'Keep large data in a table or store of its own and put its key in the payload; fila_set_payload_limits(bytes, depth) sets the limits.';
    END IF;
    IF jsonb_path_exists(NEW.payload, ('strict $.**{' || max_depth || '} ? (@.type() == "array" || @.type() == "object")')::jsonpath) THEN
        RAISE EXCEPTION 'payload of job % (kind %) nests arrays and objects deeper than % levels', NEW.id, to_json(NEW.kind), max_depth
            USING ERRCODE = 'check_violation', CONSTRAINT = 'fila_jobs_payload_limits', TABLE = 'fila_jobs', COLUMN = 'payload',
                  HINT = 'fila_set_payload_limits(bytes, depth) sets the limits.';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER fila_jobs_payload_limits
    AFTER INSERT OR UPDATE OF payload ON fila_jobs
    FOR EACH ROW
    WHEN (pg_column_size(NEW.payload) > 8192)
    EXECUTE FUNCTION fila_payload_check('1048576', '64');

-- fila_set_payload_limits replaces the trigger with new limits, at once for
-- every session. It takes a lock that waits for the table's writers in
-- flight and holds new ones meanwhile: give it a lock_timeout on a busy
-- table (runtime.SetTablePayloadLimits and `fila jobs limits` do).
CREATE FUNCTION fila_set_payload_limits(max_bytes int, max_depth int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF max_bytes IS NULL OR max_bytes < 1024 OR max_bytes > 268435455 THEN
        RAISE EXCEPTION 'max_bytes % out of range: allowed 1024 to 268435455 (jsonb''s own limit)', max_bytes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_depth IS NULL OR max_depth < 1 OR max_depth > 10000 THEN
        RAISE EXCEPTION 'max_depth % out of range: allowed 1 to 10000', max_depth
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DROP TRIGGER IF EXISTS fila_jobs_payload_limits ON fila_jobs;
    EXECUTE format($t$CREATE TRIGGER fila_jobs_payload_limits
    AFTER INSERT OR UPDATE OF payload ON fila_jobs
    FOR EACH ROW
    WHEN (pg_column_size(NEW.payload) > %s)
    EXECUTE FUNCTION fila_payload_check(%L, %L)$t$, max_bytes / 128, max_bytes, max_depth);
END
$$;

-- fila_payload_limits returns the limits the trigger enforces; NULLs when
-- it was dropped or disabled.
CREATE FUNCTION fila_payload_limits(OUT max_bytes int, OUT max_depth int)
LANGUAGE sql STABLE AS $$
SELECT a[1]::int, a[2]::int
FROM (SELECT (SELECT string_to_array(encode(t.tgargs, 'escape'), '\000')
              FROM pg_trigger t
              WHERE t.tgrelid = 'fila_jobs'::regclass AND t.tgname = 'fila_jobs_payload_limits'
                AND t.tgenabled <> 'D') AS a) args
$$;
