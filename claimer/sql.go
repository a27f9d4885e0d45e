package claimer

// The hot statements call the functions in migrations/schema.sql: PL/pgSQL
// caches the plans of the statements inside them per backend, so these
// one-line calls are all that is parsed and planned per round trip, on a
// direct connection and through PgBouncer in transaction mode alike. The
// parameters carry explicit types because pgx sends them without a
// server-side describe (QueryExecModeExec).
const (
	// fila_claim(p_queue text, p_kinds text[], p_limit integer, p_lease_ms
	// double precision, p_limit_kinds text[], p_limit_paths text[],
	// p_limit_max integer[], p_rate_kinds text[], p_rate_paths text[],
	// p_rate_max integer[], p_rate_period_ms double precision[], p_worker
	// text) RETURNS TABLE(id bigint, kind text, payload text, priority
	// smallint, attempt integer, max_attempts integer, created_at timestamp
	// with time zone, started_at timestamp with time zone, wait_ms double
	// precision, rescued integer, next_due_ms double precision, metadata text,
	// tags text[], policy text)
	sqlClaim = `SELECT id, kind, payload, priority, attempt, max_attempts, created_at, started_at,
       wait_ms, rescued, next_due_ms, metadata, tags, policy
FROM fila_claim($1::text, $2::text[], $3::int, $4::float8, $5::text[], $6::text[], $7::int[],
                $8::text[], $9::text[], $10::int[], $11::float8[], $12::text)`

	// fila_claim_id(p_id bigint, p_queue text, p_kinds text[], p_lease_ms
	// double precision, p_worker text) RETURNS TABLE(id bigint, kind text,
	// payload text, priority smallint, attempt integer, max_attempts integer,
	// created_at timestamp with time zone, started_at timestamp with time
	// zone, wait_ms double precision, metadata text, tags text[], policy text)
	sqlClaimID = `SELECT id, kind, payload, priority, attempt, max_attempts, created_at, started_at, wait_ms, metadata, tags,
       policy
FROM fila_claim_id($1::bigint, $2::text, $3::text[], $4::float8, $5::text)`

	// The statement fila_claim_id runs, sent as it is, for connections that
	// reach PostgreSQL directly: prepared once per connection, it skips the
	// PL/pgSQL call around it. Claiming one job 600 times at 10 to 100 ms
	// apart on loopback (p50), the call took 1.18–1.61 ms, this statement
	// 1.13–1.46 ms, the bench floor's bare claim 1.07–1.43 ms.
	// TestDirectClaimIDIsTheFunctionsStatement keeps the two the same. The
	// leading comment names it where statements are listed
	// (pg_stat_statements, pg_stat_activity, tracers).
	sqlClaimIDDirect = `/* fila_claim_id */ UPDATE fila_jobs j
    SET state       = 'running',
        attempts    = j.attempts + 1,
        lease_until = now() + make_interval(secs => $4::float8 / 1000),
        started_at  = now(),
        worker      = $5::text
    WHERE j.id = (SELECT x.id FROM fila_jobs x
                  WHERE x.id = $1::bigint AND x.state = 'pending' AND x.queue = $2::text
                    AND x.run_at <= now() AND x.kind = ANY ($3::text[])
                    AND NOT EXISTS (SELECT 1 FROM fila_queues q WHERE q.queue = $2::text AND q.paused)
                    AND CASE WHEN x.unique_key IS NOT NULL THEN fila_unique_holder(x.id, x.kind, x.unique_key, x.unique_states, 'pending', 'running') END IS NULL
                  FOR NO KEY UPDATE OF x SKIP LOCKED)
    RETURNING j.id, j.kind, j.payload::text, j.priority, j.attempts, j.max_attempts,
              j.created_at, j.started_at,
              (extract(epoch FROM now() - greatest(j.created_at, j.run_at)) * 1000)::float8,
              j.metadata::text, j.tags, fila_job_policy(j.policy, j.metadata)::text`

	// fila_finish(p_ids bigint[], p_attempts integer[],
	// p_started timestamp with time zone[], p_ok boolean[], p_errs text[],
	// p_delay_ms double precision[], p_permanent boolean[],
	// p_snooze boolean[], p_outputs text[])
	// RETURNS TABLE(id bigint, attempt integer,
	// started_at timestamp with time zone, state text, due_ms double precision)
	sqlFinish = `SELECT id, attempt, started_at, state, due_ms
FROM fila_finish($1::bigint[], $2::int[], $3::timestamptz[], $4::bool[], $5::text[], $6::float8[], $7::bool[],
                 $8::bool[], $9::text[])`

	// fila_complete(p_ids bigint[], p_attempts integer[],
	// p_started timestamp with time zone[]) RETURNS TABLE(ids bigint[],
	// attempts integer[], started timestamp with time zone[])
	sqlComplete = `SELECT ids, attempts, started FROM fila_complete($1::bigint[], $2::int[], $3::timestamptz[])`

	// fila_heartbeat(p_ids bigint[], p_attempts integer[],
	// p_started timestamp with time zone[], p_lease_ms double precision)
	// RETURNS TABLE(id bigint, attempt integer,
	// started_at timestamp with time zone, status text)
	sqlHeartbeat = `SELECT id, attempt, started_at, status
FROM fila_heartbeat($1::bigint[], $2::int[], $3::timestamptz[], $4::float8)`

	// fila_release(p_ids bigint[], p_attempts integer[],
	// p_started timestamp with time zone[], p_reason text) RETURNS integer
	sqlRelease = `SELECT fila_release($1::bigint[], $2::int[], $3::timestamptz[], $4::text)`

	// Which of some jobs still exist: for the outcomes and heartbeats the
	// hot statements did not list (a row locked for a moment, or deleted).
	sqlExisting = `SELECT id FROM fila_jobs WHERE id = ANY ($1::bigint[])`

	// The safety poll of every queue of a worker at once: per queue, whether
	// a job of the worker's kinds is runnable, when its next scheduled job
	// is due, and whether the queue is paused; and, once, whether a lease
	// expired and when the next one does. A few index probes per queue in
	// one statement, where a claim per queue cost a transaction each. The
	// tables and indexes it reads are in migrations/schema.sql.
	sqlSweep = `SELECT q.queue,
       EXISTS (SELECT 1 FROM fila_jobs x
               WHERE x.state = 'pending' AND x.queue = q.queue AND x.run_at <= now() AND x.kind = ANY ($2::text[])),
       (SELECT (extract(epoch FROM x.run_at - clock_timestamp()) * 1000)::float8 FROM fila_jobs x
        WHERE x.state = 'pending' AND x.queue = q.queue AND x.run_at > now()
        ORDER BY x.run_at LIMIT 1),
       EXISTS (SELECT 1 FROM fila_queues p WHERE p.queue = q.queue AND p.paused),
       EXISTS (SELECT 1 FROM fila_jobs x WHERE x.state = 'running' AND x.lease_until < now()),
       (SELECT (extract(epoch FROM min(x.lease_until) - clock_timestamp()) * 1000)::float8
        FROM fila_jobs x WHERE x.state = 'running')
FROM unnest($1::text[]) AS q(queue)`

	// fila_sleep(p_queue text, p_worker text) RETURNS boolean
	sqlSleep = `SELECT fila_sleep($1::text, $2::text)`
	sqlWake  = `DELETE FROM fila_sleepers WHERE queue = $1::text AND worker = $2::text`

	// sqlCompleteTx runs in the caller's transaction, so it is a plain
	// statement: its plan is the caller's connection's business.
	// A job whose unique_states hold completed but not running lets its key
	// go if another job completed with it meanwhile (see fila_unique_holder
	// in migrations/schema.sql).
	sqlCompleteTx = `UPDATE fila_jobs j
SET state = 'completed', finished_at = now(), lease_until = NULL, output = coalesce($4::jsonb, j.output),
    unique_key = CASE WHEN j.unique_key IS NOT NULL
                       AND fila_unique_holder(j.id, j.kind, j.unique_key, j.unique_states, 'running', 'completed') IS NOT NULL
                      THEN NULL ELSE j.unique_key END
WHERE j.id = $1::bigint AND j.attempts = $2::int AND j.started_at = $3::timestamptz AND j.state = 'running'`

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

	// Starts of rate-limited kinds a minute past their period, which no
	// claim counts any more: those of keys no claim came back to (a claim
	// deletes its key's own). A minute late, as the claim does, so a claim
	// that began earlier still counts them (see migrations/schema.sql).
	sqlDeleteRateStarts = `DELETE FROM fila_rate_starts
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM fila_rate_starts
    WHERE until < now() - interval '1 minute'
    ORDER BY until
    LIMIT $1::int))`
)
