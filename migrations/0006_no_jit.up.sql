-- 0006: no JIT compilation on the hot path.
--
-- PostgreSQL compiles a statement whose estimated cost passes
-- jit_above_cost (100 000 by default), and compiles it again on every
-- execution. The claim's estimates grow with the pending index: with a
-- million jobs scheduled ahead, every claim was estimated above the
-- threshold and spent about 25 ms compiling code to return one row in
-- under a millisecond (measured with auto_explain: "JIT: Functions: 88 …
-- Emission 24.9 ms"; a pgbench loop of insert, claim and complete took
-- 31.3 ms per claim, 0.69 ms with JIT off, 0.62 ms on an empty table).
-- These functions read a few rows through indexes: they never gain from
-- JIT, so they turn it off for their own statements, whatever the server's
-- setting.
ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[]) SET jit = off;
ALTER FUNCTION fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[]) SET jit = off;
ALTER FUNCTION fila_heartbeat(bigint[], int[], timestamptz[], float8) SET jit = off;
ALTER FUNCTION fila_release(bigint[], int[], timestamptz[], text) SET jit = off;
ALTER FUNCTION fila_sleep(text, text) SET jit = off;
