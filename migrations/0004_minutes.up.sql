-- 0004: what each worker did, minute by minute: jobs completed and failed
-- per queue, and a histogram of their pickup latency. Workers write one row
-- per queue per minute in which they did anything; dashboards read the last
-- hour from here instead of scanning job rows, so the read stays small
-- however many jobs the table holds.
CREATE TABLE fila_minutes (
    minute         timestamptz NOT NULL, -- start of the minute, database clock
    queue          text        NOT NULL,
    worker         text        NOT NULL, -- fila_workers.id of the writer
    completed      bigint      NOT NULL DEFAULT 0,
    failed         bigint      NOT NULL DEFAULT 0, -- attempts retried or dead
    -- Counts of claimed jobs per pickup-latency bucket; the bucket bounds
    -- are runtime.PickupBuckets, the last bucket holds everything slower.
    pickup_buckets bigint[]    NOT NULL,
    pickup_sum_ms  float8      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, worker)
);
