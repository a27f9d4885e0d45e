-- 0029: the River jobs `fila import river` has moved, one row per River id.
--
-- An import skips the River ids it has moved already. It found them by
-- their metadata (river_job_id), one probe of fila_jobs_metadata_idx per
-- id: a GIN index whose pending list (fastupdate) every probe reads whole,
-- about 5 ms each once a few tens of thousands of jobs had moved, so that
-- 100 000 jobs took 4 minutes and a rerun that moved nothing 10. A primary
-- key answers a batch's ids in one index scan, and lets the insert skip
-- them itself (ON CONFLICT DO NOTHING).
--
-- The row outlives its job: an imported job that completed and was then
-- cleaned by retention is still known as moved, so a later run of the
-- import with River's rows still there does not run it a second time.
CREATE TABLE fila_river_imports (
    river_job_id bigint PRIMARY KEY,
    imported_at  timestamptz NOT NULL DEFAULT now()
);

-- Jobs imported before this version are known by their metadata alone:
-- one scan of fila_jobs finds them, once (the metadata index cannot answer
-- "has the key": jsonb_path_ops indexes values). Their imported_at is the
-- migration's time, the import's being unknown.
INSERT INTO fila_river_imports (river_job_id)
SELECT DISTINCT (j.metadata->>'river_job_id')::bigint
FROM fila_jobs j
WHERE jsonb_typeof(j.metadata->'river_job_id') = 'number'
  AND j.metadata->>'river_job_id' ~ '^[0-9]{1,18}$';
