package riverimport_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/riverimport"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/migrations"
)

// The importer's error cases and its idempotency, on the part of River's
// schema it reads. Its tests against River's real schema, with jobs River
// put in every state, are in bench/peers (riverimport_test.go), the module
// that depends on River.

// minimalRiverSQL is the part of river_job an error case needs; River's
// own schema is built by rivermigrate in bench/peers.
const minimalRiverSQL = `
CREATE TYPE river_job_state AS ENUM ('available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running', 'scheduled');
CREATE TABLE river_job (
    id bigserial PRIMARY KEY,
    state river_job_state NOT NULL DEFAULT 'available',
    attempt smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL DEFAULT 25,
    attempted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finalized_at timestamptz,
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    priority smallint NOT NULL DEFAULT 1,
    args jsonb NOT NULL DEFAULT '{}',
    attempted_by text[],
    errors jsonb[],
    kind text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    queue text NOT NULL DEFAULT 'default',
    tags varchar(255)[] NOT NULL DEFAULT '{}'
)`

func TestNoRiverTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testrt.Migrated(t)
	_, err := riverimport.Import(ctx, db.Pool, riverimport.Config{})
	require.ErrorIs(t, err, riverimport.ErrNoRiverTable)
	require.ErrorContains(t, err, "no river_job table in the connection's search_path of database "+db.Name)
	require.ErrorContains(t, err, "--river-schema")

	_, err = db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = riverimport.Import(ctx, db.Pool, riverimport.Config{Schema: "elsewhere"})
	require.ErrorIs(t, err, riverimport.ErrNoRiverTable)
	require.ErrorContains(t, err, "in schema elsewhere of database")
}

func TestFilaNotMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = riverimport.Import(ctx, db.Pool, riverimport.Config{})
	require.ErrorContains(t, err, "run `fila migrate` first")
}

func TestRunningJobsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testrt.Migrated(t)
	_, err := db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_job (kind) VALUES ('a');
		INSERT INTO river_job (kind, state, attempt, attempted_at) VALUES ('a', 'running', 1, now())`)
	require.NoError(t, err)
	_, err = riverimport.Import(ctx, db.Pool, riverimport.Config{})
	require.ErrorIs(t, err, riverimport.ErrRunning)
	require.ErrorContains(t, err, "1 in river_job")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Zero(t, n, "nothing moved")
}

// A job Fila cannot hold stops the import at its batch, named by its River
// id; the batches before it have moved, and stay moved.
func TestBadJobIsNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testrt.Migrated(t)
	_, err := db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_job (kind) VALUES ('a'), ('a'), ('a');
		INSERT INTO river_job (kind, queue) VALUES ('a', 'no spaces allowed')`)
	require.NoError(t, err)
	rep, err := riverimport.Import(ctx, db.Pool, riverimport.Config{BatchSize: 2})
	var bad *riverimport.BadJobError
	require.ErrorAs(t, err, &bad)
	require.EqualValues(t, 4, bad.ID)
	require.ErrorContains(t, err, `River job 4 (kind "a", available) cannot move: queue "no spaces allowed"`)
	require.EqualValues(t, 2, rep.MovedTotal())
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
	require.Equal(t, 2, n, "the first batch moved; the bad one's did not")
}

// filaRows is every imported job as a line of its columns, by River id.
func filaRows(t *testing.T, db *testdb.DB) map[int64]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT (metadata->>'`+riverimport.MetadataKey+`')::bigint,
		concat_ws('|', id, queue, kind, payload, priority, state, run_at, attempts, max_attempts, last_error, errors, tags, metadata)
		FROM fila_jobs ORDER BY id`)
	require.NoError(t, err)
	out := map[int64]string{}
	var id int64
	var line string
	_, err = pgx.ForEachRow(rows, []any{&id, &line}, func() error {
		_, dup := out[id]
		require.False(t, dup, "River job %d imported twice", id)
		out[id] = line
		return nil
	})
	require.NoError(t, err)
	return out
}

// A second run, a dry run after it, and a run after the imported jobs were
// deleted from fila_jobs (as retention deletes completed ones) move nothing
// again: every River id moved is recorded.
func TestImportTwiceMovesNothingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testrt.Migrated(t)
	_, err := db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_job (kind, queue, args, tags, metadata, priority, scheduled_at, state)
		SELECT 'k' || (i % 3), 'q' || (i % 2), jsonb_build_object('n', i), ARRAY['t' || (i % 4)], '{"team": "x"}', 1 + i % 4,
		       now() + make_interval(mins => i), CASE WHEN i % 5 = 0 THEN 'scheduled' ELSE 'available' END::river_job_state
		FROM generate_series(1, 25) AS i`)
	require.NoError(t, err)

	cfg := riverimport.Config{BatchSize: 4}
	rep, err := riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 25, rep.MovedTotal())
	require.Zero(t, rep.AlreadyImported)
	require.Equal(t, 7, rep.Batches)
	first := filaRows(t, db)
	require.Len(t, first, 25)

	rep, err = riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.EqualValues(t, 25, rep.AlreadyImported)
	require.Equal(t, first, filaRows(t, db), "a second run changed the imported jobs")

	dry := cfg
	dry.DryRun = true
	rep, err = riverimport.Import(ctx, db.Pool, dry)
	require.NoError(t, err)
	require.Zero(t, rep.MovedTotal())
	require.EqualValues(t, 25, rep.AlreadyImported)

	// One more River job, then the imported ones gone from fila_jobs:
	// only the new one moves.
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_job (kind) VALUES ('late')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `DELETE FROM fila_jobs WHERE id IN (SELECT id FROM fila_jobs ORDER BY id LIMIT 10)`)
	require.NoError(t, err)
	rep, err = riverimport.Import(ctx, db.Pool, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.MovedTotal())
	require.EqualValues(t, 25, rep.AlreadyImported)
	after := filaRows(t, db)
	require.Len(t, after, 16)
	require.Contains(t, after[26], "|late|")
}

// Jobs imported by a version without fila_river_imports are known by their
// metadata: the migration that adds the table records them.
func TestImportKnowsJobsMovedBeforeItsTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	all, err := migrations.All()
	require.NoError(t, err)
	before := 0
	for _, m := range all {
		if m.Name == "river_imports" {
			break
		}
		before = m.Version
	}
	_, err = migrations.MigrateTo(ctx, db.Pool, before)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, minimalRiverSQL)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO river_job (kind) SELECT 'a' FROM generate_series(1, 5);
		INSERT INTO fila_jobs (kind, metadata) VALUES
			('a', '{"river_job_id": 1}'), ('a', '{"river_job_id": 2, "team": "x"}'), ('a', '{"river_job_id": 2}'),
			('a', '{"river_job_id": "3"}'), ('a', '{"river_job_id": 4.5}'), ('a', '{"other": 5}')`)
	require.NoError(t, err)
	_, err = migrations.Migrate(ctx, db.Pool)
	require.NoError(t, err)

	rep, err := riverimport.Import(ctx, db.Pool, riverimport.Config{})
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.AlreadyImported, "River jobs 1 and 2 moved before")
	require.EqualValues(t, 3, rep.MovedTotal(), "3, 4 and 5 had no number of theirs in any job's metadata")
}
