-- 0018: a job's errors that are not a list never fail the statements that
-- add to them.
--
-- errors is jsonb: a row written by hand may hold any JSON there, such as
-- {} or null. fila_append_error took its length as an array's, and a
-- running row whose lease had expired with errors = '{}' made the rescue,
-- and so every claim of every worker, fail with SQLSTATE 22023 in a loop.
-- A value that is not an array is now kept as the first entry of a new
-- list, and the attempt's error follows.
CREATE OR REPLACE FUNCTION fila_append_error(errors jsonb, attempt int, err text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_typeof(errors) IS DISTINCT FROM 'array' THEN jsonb_build_array(errors)
                WHEN jsonb_array_length(errors) >= 20 THEN errors - 0
                ELSE errors END
           || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(), 'error', err))
$$;
