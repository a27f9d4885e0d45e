package claimer

// The hot statements call the functions migration 0002 creates: PL/pgSQL
// caches the plans of the statements inside them per backend, so these
// one-line calls are all that is parsed and planned per round trip, on a
// direct connection and through PgBouncer in transaction mode alike. The
// parameters carry explicit types because pgx sends them without a
// server-side describe (QueryExecModeExec).
const (
	sqlClaim = `SELECT id, kind, payload, priority, attempt, max_attempts, created_at, started_at,
       wait_ms, rescued, next_due_ms
FROM fila_claim($1::text, $2::text[], $3::int, $4::float8, $5::text[], $6::text[], $7::int[])`

	sqlClaimID = `SELECT id, kind, payload, priority, attempt, max_attempts, created_at, started_at, wait_ms
FROM fila_claim_id($1::bigint, $2::text, $3::text[], $4::float8)`

	sqlFinish = `SELECT id, attempt, started_at, state, due_ms
FROM fila_finish($1::bigint[], $2::int[], $3::timestamptz[], $4::bool[], $5::text[], $6::float8[], $7::bool[])`

	sqlHeartbeat = `SELECT id, attempt, started_at, status
FROM fila_heartbeat($1::bigint[], $2::int[], $3::timestamptz[], $4::float8)`

	sqlRelease = `SELECT fila_release($1::bigint[], $2::int[], $3::timestamptz[], $4::text)`

	// Which of some jobs still exist: for the outcomes and heartbeats the
	// hot statements did not list (a row locked for a moment, or deleted).
	sqlExisting = `SELECT id FROM fila_jobs WHERE id = ANY ($1::bigint[])`

	sqlSleep = `SELECT fila_sleep($1::text, $2::text)`
	sqlWake  = `DELETE FROM fila_sleepers WHERE queue = $1::text AND worker = $2::text`

	// sqlCompleteTx runs in the caller's transaction, so it is a plain
	// statement: its plan is the caller's connection's business.
	sqlCompleteTx = `UPDATE fila_jobs
SET state = 'completed', finished_at = now(), lease_until = NULL
WHERE id = $1::bigint AND attempts = $2::int AND started_at = $3::timestamptz AND state = 'running'`

	// Retention deletes one small batch of finished jobs older than $1
	// seconds per statement, one statement per state so each reads its own
	// partial index. Small batches keep each transaction short; SKIP LOCKED
	// lets several workers do it at once without waiting on each other.
	sqlDeleteCompleted = `DELETE FROM fila_jobs
WHERE id IN (
    SELECT id FROM fila_jobs
    WHERE state = 'completed' AND finished_at < now() - make_interval(secs => $1::float8)
    ORDER BY finished_at
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED)`
	sqlDeleteDead = `DELETE FROM fila_jobs
WHERE id IN (
    SELECT id FROM fila_jobs
    WHERE state = 'dead' AND finished_at < now() - make_interval(secs => $1::float8)
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED)`
	sqlDeleteCancelled = `DELETE FROM fila_jobs
WHERE id IN (
    SELECT id FROM fila_jobs
    WHERE state = 'cancelled' AND finished_at < now() - make_interval(secs => $1::float8)
    ORDER BY finished_at
    LIMIT $2::int
    FOR UPDATE SKIP LOCKED)`
)
