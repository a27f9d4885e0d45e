package suite

import _ "embed"

// SQL the scenarios run besides the runtime's own. The floors' statements
// are the bench's own on purpose: a floor is the simplest correct SQL, not
// the runtime's, so the runtime can be measured against it.
var (
	//go:embed sql/complete.sql
	completeSQL string

	//go:embed sql/floor_claim.sql
	floorClaimSQL string

	//go:embed sql/claim_batch.sql
	claimBatchSQL string
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

	// tableStatsSQL reads the jobs table's size on disk and the statistics'
	// row counts. n_tup_del counts every row ever deleted from it.
	tableStatsSQL = `SELECT pg_total_relation_size('fila_jobs'), pg_indexes_size('fila_jobs'),
       n_live_tup, n_dead_tup, n_tup_del
FROM pg_stat_user_tables WHERE relid = 'fila_jobs'::regclass`

	// seedCompletedSQL inserts $1 completed jobs, finished just now, so
	// no retention deletes them while the scenario runs.
	seedCompletedSQL = `INSERT INTO fila_jobs (kind, state, attempts, started_at, finished_at)
SELECT 'seed', 'completed', 1, now(), now() FROM generate_series(1, $1::int)`

	// seedScheduledSQL inserts $1 pending jobs due a day from now, one
	// millisecond apart, as a backlog of scheduled jobs would be.
	seedScheduledSQL = `INSERT INTO fila_jobs (kind, run_at)
SELECT 'seed', now() + interval '1 day' + i * interval '1 millisecond'
FROM generate_series(1, $1::int) AS i`

	// seededSQL counts what the seed left in the table.
	seededSQL = `SELECT count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'pending' AND run_at > now() + interval '1 hour')
FROM fila_jobs WHERE kind = 'seed'`

	// vacuumJobsSQL vacuums and analyzes the jobs table after seeding, as
	// autovacuum would soon after: the figure is the steady state of a big
	// table, not the minutes after a bulk load.
	vacuumJobsSQL = `VACUUM (ANALYZE) fila_jobs`

	// countJobsSQL counts every job.
	countJobsSQL = `SELECT count(*) FROM fila_jobs`

	// truncateSQL empties the jobs table between bulk rounds.
	truncateSQL = `TRUNCATE fila_jobs`
)
