-- 0007: the index of scheduled jobs carries their kind.
--
-- Every claim that leaves slots free reads the next 100 scheduled jobs of
-- its queue to find when the next one of its kinds comes due (fila_claim).
-- The kind was in the table only, so that read fetched up to 100 heap rows:
-- with a million jobs scheduled ahead it was 0.84 ms of a 1.31 ms claim
-- (auto_explain), one of the costs that slowed pickup on such a table (the
-- other: see 0006). With the kind in the index, the read is an index-only scan
-- of a few pages once the rows are all-visible, as a backlog scheduled
-- ahead soon is.
--
-- Rebuilding the index takes a lock that holds inserts for as long as the
-- build lasts: about a second per million pending jobs.
DROP INDEX fila_jobs_scheduled_idx;
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs (queue, run_at) INCLUDE (kind) WHERE state = 'pending';
