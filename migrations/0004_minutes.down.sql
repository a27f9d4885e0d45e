DROP TABLE IF EXISTS fila_minutes;
