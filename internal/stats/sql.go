package stats

// The statements of a snapshot. Each reads fila_jobs only through one of its
// partial indexes, so its cost follows the backlog, the dead and cancelled
// rows, or a bounded window of recent completions, never the history: with
// the default 24 h retention the table holds tens of millions of completed
// rows. TestQueriesUseIndexes holds every statement here to that.
const (
	// Every statement reads at most a backlog's worth of index entries:
	// starting parallel workers for that costs more than it saves, several
	// times over on a small machine. Local to the snapshot's transaction.
	serialSQL = `SET LOCAL max_parallel_workers_per_gather = 0`

	clockSQL = `SELECT now(), pg_notification_queue_usage()`

	// fila_queues holds a row per queue ever paused: a few rows. A paused
	// queue's row was last updated when it was paused.
	pausedSQL = `SELECT queue, extract(epoch FROM now() - updated_at)::float8 FROM fila_queues WHERE paused`

	// Per queue and kind, so that pending jobs of a kind no live worker of
	// their queue handles can be named. Reads fila_jobs_scheduled_idx
	// alone, which holds queue, run_at and kind.
	pendingSQL = `SELECT queue, kind,
	count(*) FILTER (WHERE run_at <= now()),
	count(*) FILTER (WHERE run_at > now()),
	extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
FROM fila_jobs WHERE state = 'pending'
GROUP BY queue, kind`

	// The recurring tasks workers recorded: a row per task.
	recurringSQL = `SELECT task, kind, queue, last_slot, next_slot FROM fila_recurring ORDER BY task`

	// Reads fila_jobs_waiting_idx. A waiting job is blocked when the job
	// before it in its sequence is dead and it does not continue past it.
	waitingSQL = `SELECT j.queue, count(*),
	count(*) FILTER (WHERE j.sequence_prev IS NOT NULL AND coalesce(j.sequence_on_dead, 'block') = 'block'
	                   AND EXISTS (SELECT 1 FROM fila_jobs p WHERE p.id = j.sequence_prev AND p.state = 'dead'))
FROM fila_jobs j WHERE j.state = 'waiting'
GROUP BY j.queue`

	// Reads fila_jobs_held_idx.
	heldSQL = `SELECT queue, count(*) FROM fila_jobs WHERE state = 'held' GROUP BY queue`

	// The sequences blocked by a dead job, the oldest first.
	blockedSQL = `SELECT j.sequence_key, j.sequence_prev, j.id, j.queue
FROM fila_jobs j
JOIN fila_jobs p ON p.id = j.sequence_prev AND p.state = 'dead'
WHERE j.state = 'waiting' AND coalesce(j.sequence_on_dead, 'block') = 'block'
ORDER BY j.id
LIMIT 20`

	// Reads fila_jobs_lease_idx.
	runningSQL = `SELECT queue, count(*), count(*) FILTER (WHERE lease_until < now())
FROM fila_jobs WHERE state = 'running'
GROUP BY queue`

	// Reads fila_jobs_cancelled_idx alone: counted from the index without
	// visiting the table, and so not per queue, which the index does not
	// hold.
	cancelledSQL = `SELECT count(*) FROM fila_jobs WHERE state = 'cancelled'`

	// Dead jobs per kind from fila_jobs_dead_idx (kind, finished_at) alone,
	// and the most recent one's error by one backward step of the same index
	// per kind.
	deadSQL = `SELECT d.kind, d.jobs, d.last_at, coalesce(l.last_error, '')
FROM (SELECT kind, count(*) AS jobs, max(finished_at) AS last_at
      FROM fila_jobs WHERE state = 'dead' GROUP BY kind) d
LEFT JOIN LATERAL (
      SELECT last_error FROM fila_jobs j
      WHERE j.state = 'dead' AND j.kind = d.kind AND j.finished_at IS NOT NULL
      ORDER BY j.finished_at DESC LIMIT 1) l ON true
ORDER BY d.jobs DESC, d.kind`

	// Dead jobs per queue. fila_jobs_dead_idx holds the kind, not the
	// queue, so each dead row is read from the table: the cost follows the
	// dead rows, which DeadRetention bounds, never the history.
	deadQueuesSQL = `SELECT queue, count(*) FROM fila_jobs WHERE state = 'dead' GROUP BY queue ORDER BY queue`

	// Completed jobs: the finished index's row count from the last VACUUM or
	// ANALYZE, scaled by how much the index has grown since, as the planner
	// scales a table's (-1 when the index was never measured); and, unless
	// that estimate is above $2, an exact count up to $1 rows, from the
	// newest end of the index: retention deletes from the oldest end, whose
	// entries stay until the next vacuum.
	completedSQL = `WITH estimate AS (
	SELECT coalesce((SELECT CASE
		WHEN i.reltuples < 0 THEN -1
		WHEN i.relpages = 0 THEN i.reltuples
		ELSE i.reltuples / i.relpages * (pg_relation_size(i.oid) / current_setting('block_size')::float8)
		END::float8
	FROM pg_class i WHERE i.oid = to_regclass('fila_jobs_finished_idx')), -1) AS n)
SELECT CASE WHEN n > $2::float8 THEN NULL ELSE
	(SELECT count(*) FROM (SELECT 1 FROM fila_jobs WHERE state = 'completed' ORDER BY finished_at DESC LIMIT $1::int) c)
	END, n
FROM estimate`

	// The most recent completions, newest first along
	// fila_jobs_finished_idx: at most $1 jobs, finished in the last $2
	// seconds. Rows written without started_at count as jobs but have no run
	// time; percentile_cont skips their NULLs, and sorts each kind's run
	// times once for both percentiles.
	recentSQL = `WITH recent AS (
	SELECT kind, extract(epoch FROM finished_at - started_at) * 1000 AS ms, finished_at
	FROM fila_jobs
	WHERE state = 'completed' AND finished_at > now() - make_interval(secs => $2::float8)
	ORDER BY finished_at DESC LIMIT $1::int)
SELECT kind, count(*), count(ms),
	percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY ms::float8),
	extract(epoch FROM now() - min(finished_at))::float8
FROM recent GROUP BY kind ORDER BY count(*) DESC, kind`

	// Whether the insert trigger notifies (what runtime.NotifyTriggerOn
	// reads; read here too so that runtime may one day import this package).
	// A trigger dropped by hand notifies no one either.
	triggerSQL = `SELECT coalesce((SELECT tgenabled <> 'D' FROM pg_trigger
	WHERE tgrelid = 'fila_jobs'::regclass AND tgname = 'fila_jobs_notify'), false)`

	// Every worker row (fila_workers in migrations/schema.sql), and whether
	// it is live: refreshed within three of its liveness intervals
	// (fila_worker_live, the one definition every view shares).
	workersSQL = `SELECT id, host, pid, queues, kinds, recurring, mode, wake_source, coalesce(wake_error, ''), coalesce(degraded, ''),
	started_at, last_seen_at, extract(epoch FROM now() - last_seen_at)::float8,
	extract(epoch FROM liveness_interval)::float8, fila_worker_live(w)
FROM fila_workers w ORDER BY started_at, id`
)
