ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[]) RESET ALL;
ALTER FUNCTION fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[]) RESET ALL;
ALTER FUNCTION fila_heartbeat(bigint[], int[], timestamptz[], float8) RESET ALL;
ALTER FUNCTION fila_release(bigint[], int[], timestamptz[], text) RESET ALL;
ALTER FUNCTION fila_sleep(text, text) RESET ALL;
