-- The jobs table is a public interface: any client may enqueue with a plain
-- INSERT, and operators query it directly. Keep names and meanings stable.
CREATE TABLE fila_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL DEFAULT 'default'
                 CONSTRAINT fila_jobs_queue_valid CHECK (queue ~ '^[A-Za-z0-9_.-]{1,58}$'),
    kind         text        NOT NULL
                 CONSTRAINT fila_jobs_kind_valid CHECK (kind <> '' AND length(kind) <= 200),
    payload      jsonb       NOT NULL DEFAULT '{}',
    priority     smallint    NOT NULL DEFAULT 0,
    state        text        NOT NULL DEFAULT 'pending'
                 CONSTRAINT fila_jobs_state_valid CHECK (state IN ('pending', 'running', 'completed', 'dead', 'cancelled')),
    run_at       timestamptz NOT NULL DEFAULT now(),
    attempts     int         NOT NULL DEFAULT 0,
    max_attempts int         NOT NULL DEFAULT 5
                 CONSTRAINT fila_jobs_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_until  timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
) WITH (
    -- Every job is inserted, updated two or three times and deleted: vacuum
    -- this table after a small share of churn instead of the default 20%, and
    -- leave room on each page for updated row versions.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000,
    fillfactor = 85
);

-- The claim reads only this index: its size follows the backlog, not the
-- history, so claim cost stays flat however many finished rows the table holds.
CREATE INDEX fila_jobs_pending_idx ON fila_jobs (queue, priority, run_at, id)
    WHERE state = 'pending';

-- When the next scheduled or retried job comes due.
CREATE INDEX fila_jobs_scheduled_idx ON fila_jobs (run_at)
    WHERE state = 'pending';

-- Rescue of expired leases and the time of the next expiry.
CREATE INDEX fila_jobs_lease_idx ON fila_jobs (lease_until)
    WHERE state = 'running';

-- Retention deletes old completed rows in small batches.
CREATE INDEX fila_jobs_finished_idx ON fila_jobs (finished_at)
    WHERE state = 'completed';

-- One notification per statement per queue, carrying one job id, and only for
-- rows runnable now: a 100 000-row INSERT sends one notification, not 100 000,
-- and jobs scheduled for later are found by the workers' next-run_at timer.
CREATE FUNCTION fila_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now()
        GROUP BY queue
    LOOP
        PERFORM pg_notify('fila_' || r.queue, r.id::text);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER fila_jobs_notify
    AFTER INSERT ON fila_jobs
    REFERENCING NEW TABLE AS fila_new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION fila_notify_insert();

-- Kinds that some worker has handled, so `fila enqueue` can refuse a kind no
-- worker knows.
CREATE TABLE fila_kinds (
    kind         text PRIMARY KEY,
    queue        text NOT NULL,
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
