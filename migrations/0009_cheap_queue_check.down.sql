ALTER TABLE fila_jobs
    DROP CONSTRAINT fila_jobs_queue_valid,
    ADD CONSTRAINT fila_jobs_queue_valid CHECK (queue ~ '^[A-Za-z0-9_.-]{1,58}$');
