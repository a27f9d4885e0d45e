package riverimport

// SQL of the import. %s is river_job's name, quoted and qualified by its
// schema when one is given.
const (
	// River's jobs by state, before anything moves.
	countSQL = `SELECT state::text, count(*) FROM %s GROUP BY 1`

	// River's jobs by state and kind, for a report.
	countByKindSQL = `SELECT state::text, kind, count(*) FROM %s GROUP BY 1, 2 ORDER BY 1, 2`

	// One batch: the next River jobs of the states asked for, in River's
	// id order. Without unique_key and unique_states, which are not moved,
	// it also reads River schemas older than those columns.
	batchSQL = `SELECT id, state::text, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
       priority, args::text, coalesce(errors::text[], '{}'), kind, metadata::text, queue, coalesce(tags::text[], '{}')
FROM %s
WHERE id > $1 AND state::text = ANY ($2::text[])
ORDER BY id
LIMIT $3`

	deleteSQL = `DELETE FROM %s WHERE id = ANY ($1::bigint[])`

	// Does river_job exist? to_regclass takes the quoted name.
	tableSQL = `SELECT to_regclass($1) IS NOT NULL`
)

// Statements on fila_jobs.
const (
	// One importer at a time: two would each find a batch not imported
	// yet, and both insert it.
	lockSQL = `SELECT pg_advisory_xact_lock(1718185059, hashtext('fila import river'))`

	nowSQL = `SELECT now()`

	// Which of these River ids moved already: one scan of
	// fila_river_imports' primary key for the whole batch.
	importedSQL = `SELECT river_job_id FROM fila_river_imports WHERE river_job_id = ANY ($1::bigint[])`

	// One statement a batch, so the insert trigger notifies once per queue.
	// A job is written only if its River id was not recorded yet: the
	// statement itself moves nothing twice, whatever the probe before it
	// found. The rows keep River's order: their ids grow with River's.
	insertSQL = `WITH src AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::timestamptz[], $7::int[], $8::int[],
                         $9::text[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::text[], $15::text[],
                         $16::bigint[])
        WITH ORDINALITY AS t(q, k, p, pr, st, ra, at, ma, le, ca, sa, fa, er, tg, md, rid, n)
), moved AS (
    INSERT INTO fila_river_imports (river_job_id)
    SELECT rid FROM src
    ON CONFLICT (river_job_id) DO NOTHING
    RETURNING river_job_id
)
INSERT INTO fila_jobs (queue, kind, payload, priority, state, run_at, attempts, max_attempts,
                       last_error, created_at, started_at, finished_at, errors, tags, metadata)
SELECT q, k, p::jsonb, pr, st, coalesce(ra, now()), at, ma, le, ca, sa, fa, er::jsonb, string_to_array(tg, E'\x1f'), md::jsonb
FROM src JOIN moved ON moved.river_job_id = src.rid
ORDER BY n`
)
