package riverimport_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/riverimport"
	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
)

// The importer's error cases. Its tests against River's real schema, with
// jobs River put in every state, are in bench/peers (riverimport_test.go),
// the module that depends on River.

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
