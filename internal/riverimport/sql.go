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

	// Which of these River ids moved already: a probe per id of the GIN
	// index on metadata.
	importedSQL = `SELECT r FROM unnest($1::bigint[]) AS r
WHERE EXISTS (SELECT 1 FROM fila_jobs j
              WHERE j.metadata @> jsonb_build_object('` + MetadataKey + `', r))`

	// One statement a batch, so the insert trigger notifies once per queue.
	// The rows keep River's order: their ids grow with River's.
	insertSQL = `INSERT INTO fila_jobs (queue, kind, payload, priority, state, run_at, attempts, max_attempts,
                       last_error, created_at, started_at, finished_at, errors, tags, metadata)
SELECT q, k, p::jsonb, pr, st, coalesce(ra, now()), at, ma, le, ca, sa, fa, er::jsonb, string_to_array(tg, E'\x1f'), md::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::timestamptz[], $7::int[], $8::int[],
            $9::text[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::text[], $15::text[])
     WITH ORDINALITY AS t(q, k, p, pr, st, ra, at, ma, le, ca, sa, fa, er, tg, md, n)
ORDER BY n`
)
