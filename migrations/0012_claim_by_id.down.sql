DROP FUNCTION fila_claim_id(bigint, text, text[], float8);
