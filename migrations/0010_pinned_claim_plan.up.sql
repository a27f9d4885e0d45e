-- 0010: the claim's plan, made once per connection, never scans the table.
--
-- fila_claim plans its statement once per connection (0006). A worker that
-- starts on an empty or tiny table, a new deployment or a fresh database,
-- got a plan that updated the claimed rows through a hash join against a
-- sequential scan of fila_jobs (scanning a few pages is the cheapest way
-- to reach a few rows), and it kept that plan while the table grew: every
-- claim then read the whole table. With a few thousand rows a one-job
-- claim took 0.93 ms instead of 0.61 (pgbench, interleaved runs), and the
-- cost grows with the table until an autoanalyze happens to replan it.
--
-- Every access in the claim has an index made for it, so the planner is
-- held to index probes and nested loops, as the outcome functions are
-- (0008).
ALTER FUNCTION fila_claim(text, text[], int, float8, text[], text[], int[])
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
