package suite

import _ "embed"

// SQL the scenarios run besides the runtime's own.
var (
	//go:embed sql/complete.sql
	completeSQL string
)

const (
	// analyzeSQL refreshes the planner's statistics after a bulk insert, as
	// autovacuum would a moment later, so the claim is planned on the
	// backlog that is really there.
	analyzeSQL = `ANALYZE fila_jobs`

	// producerInsertSQL is the plainest enqueue any client can send, of a
	// job of producerKind.
	producerInsertSQL = `INSERT INTO fila_jobs (kind) VALUES ('x')`
	producerKind      = "x"

	disableTriggerSQL = `ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify`

	// transactionsSQL reads a database's transaction counters. Run from
	// another database, it does not count itself.
	transactionsSQL = `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1::text`

	// autovacuumSQL says which of the databases an autovacuum worker is in.
	autovacuumSQL = `SELECT DISTINCT datname FROM pg_stat_activity
WHERE backend_type = 'autovacuum worker' AND datname = ANY($1::text[])`

	// vacuumSQL leaves autovacuum nothing to do in a fresh database.
	vacuumSQL = `VACUUM (ANALYZE)`

	// backendsSQL lists the server processes connected to a database.
	backendsSQL = `SELECT pid FROM pg_stat_activity WHERE datname = $1::text`
)
