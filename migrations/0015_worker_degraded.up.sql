-- 0015: a worker says what it does less of than configured.
--
-- A claim or an outcome statement that runs out of time (a slow database,
-- a statement timeout) is sent again with fewer jobs, down to one, so the
-- same statement does not time out for ever; the worker records what it
-- cut and why, for `fila stats` and the dashboard.
ALTER TABLE fila_workers ADD COLUMN degraded text;
