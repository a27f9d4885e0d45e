-- 0024 down: every outcome through fila_finish.

DROP FUNCTION fila_complete(bigint[], int[], timestamptz[]);
