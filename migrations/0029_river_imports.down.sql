-- 0029 down: imports find the jobs they moved by their metadata again.

DROP TABLE fila_river_imports;
