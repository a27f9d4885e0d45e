ALTER TABLE fila_workers DROP COLUMN degraded;
