ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[])
    RESET enable_seqscan;
ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[])
    RESET enable_hashjoin;
ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[])
    RESET enable_mergejoin;
