CREATE OR REPLACE FUNCTION fila_append_error(errors jsonb, attempt int, err text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END
           || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(), 'error', err))
$$;
