DROP FUNCTION fila_payload_limits();
DROP FUNCTION fila_set_payload_limits(int, int);
DROP TRIGGER fila_jobs_payload_limits ON fila_jobs;
DROP FUNCTION fila_payload_check();
