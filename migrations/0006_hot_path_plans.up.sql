-- 0006: plans of the hot path that do not grow with the table.
--
-- No JIT. PostgreSQL compiles a statement whose estimated cost passes
-- jit_above_cost (100 000 by default), and compiles it again on every
-- execution. The claim's estimates grow with the pending index: with a
-- million jobs scheduled ahead, every claim was estimated above the
-- threshold and spent about 25 ms compiling code to return one row in
-- under a millisecond (auto_explain: "JIT: Functions: 88 … Emission
-- 24.9 ms"; a pgbench loop of insert, claim and complete took 31.3 ms per
-- claim, 0.69 ms with JIT off, 0.62 ms on an empty table).
--
-- One generic plan. PL/pgSQL keeps a statement's plan per backend, but
-- plans it again on every call while it judges a custom plan cheaper than
-- the generic one, which a table holding a long history and a large
-- backlog made it do: pickup at 100 jobs/s on a table of a million
-- completed and a million scheduled jobs took 1.6 to 2 times as long as on
-- an empty table (fila bench --scenarios bigtable), and 1.10 times with
-- the generic plan forced. The claim's plan is the same index walk
-- whatever the parameters (the queue, the kinds, the batch size), so
-- planning it once per connection is right. The outcome functions keep
-- custom plans: their arrays' length decides their best plan, and forcing
-- the generic one lowered the drain rate (fila bench --scenarios drain,
-- four interleaved runs each: median 7.3k jobs/s against 9.0k).
--
-- These functions read and write a few rows through indexes: the settings
-- apply to their own statements only, whatever the server's.
ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[])
    SET jit = off SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION fila_finish(bigint[], int[], timestamptz[], bool[], text[], float8[], bool[])
    SET jit = off;
ALTER FUNCTION fila_heartbeat(bigint[], int[], timestamptz[], float8)
    SET jit = off;
ALTER FUNCTION fila_release(bigint[], int[], timestamptz[], text)
    SET jit = off;
ALTER FUNCTION fila_sleep(text, text)
    SET jit = off;
