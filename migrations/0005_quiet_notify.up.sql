-- 0005: producers notify only while some worker sleeps.
--
-- A committing transaction that has sent NOTIFY takes one lock for the whole
-- instance until its commit is flushed, so notifying producers commit one at
-- a time. Under load every worker is busy and polls by itself; a
-- notification then wakes nobody and only slows the producer down. So a
-- worker records here, per queue, that it sleeps (waits for a
-- notification), and the insert trigger notifies only when some worker does.
--
-- Nothing is lost in between, by this rule: a producer's trigger takes a
-- shared advisory lock on the queue, held until its commit, before reading
-- this table; a worker records its sleep only while holding the same lock
-- exclusively, which it gets only when no producer transaction on the queue
-- is in flight, and claims again after that commit. Either the producer sees
-- the sleeper and notifies, or its job committed before the worker's last
-- claim began and that claim sees it. The worker only tries the lock: it
-- never makes a producer wait behind it. A worker that stops sleeping (busy
-- under load) deletes its row and polls by itself until the queue runs dry,
-- then tries to sleep again the same way; while it cannot, it keeps
-- polling.
--
-- A program of your own that LISTENs for jobs records itself here the same
-- way, or with queue '*' for every queue: INSERT INTO fila_sleepers (queue,
-- worker) VALUES ('*', 'my-listener').
CREATE TABLE fila_sleepers (
    queue  text        NOT NULL, -- a queue, or '*': every queue
    worker text        NOT NULL,
    since  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, worker)
);

CREATE OR REPLACE FUNCTION fila_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT queue, min(id) AS id
        FROM fila_new_jobs
        WHERE state = 'pending' AND run_at <= now() + interval '10 minutes'
        GROUP BY queue
    LOOP
        -- Shared with every other producer; conflicts only with a worker
        -- recording its sleep, which waits for this transaction to end.
        PERFORM pg_advisory_xact_lock_shared(1718185058, hashtext(r.queue));
        IF EXISTS (SELECT 1 FROM fila_sleepers s WHERE s.queue IN (r.queue, '*')) THEN
            PERFORM pg_notify('fila_' || r.queue, r.id::text);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- fila_sleep records that p_worker sleeps on p_queue if no producer
-- transaction on the queue is in flight, and says whether it did (see
-- above). After true, the caller claims once more before it waits.
CREATE FUNCTION fila_sleep(p_queue text, p_worker text) RETURNS bool
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(1718185058, hashtext(p_queue)) THEN
        RETURN false;
    END IF;
    INSERT INTO fila_sleepers (queue, worker) VALUES (p_queue, p_worker)
    ON CONFLICT (queue, worker) DO NOTHING;
    RETURN true;
END
$$;

-- Vacuum the churning jobs table at full speed when autovacuum gets to it:
-- every job leaves three dead row versions, and a throttled vacuum of a
-- busy queue falls behind. (Workers that own the table also vacuum it after
-- their retention passes.)
ALTER TABLE fila_jobs SET (autovacuum_vacuum_cost_delay = 0);
