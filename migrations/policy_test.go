package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// TestJobPolicyMovesOutOfMetadata: migration 0030 moves the policy that
// earlier versions kept under the metadata key "fila" into the policy
// column, leaving the rest of the metadata as it was, and rolling it back
// puts the policy back under the key.
func TestJobPolicyMovesOutOfMetadata(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := migrations.MigrateTo(ctx, db.Pool, 29)
	require.NoError(t, err)
	insert := func(metadata *string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, metadata) VALUES ('k', $1::text::jsonb) RETURNING id`,
			metadata).Scan(&id))
		return id
	}
	str := func(s string) *string { return &s }
	mixed := insert(str(`{"fila": {"timeout_ms": 1500, "retry_base_ms": 10, "retry_max_ms": 20}, "x": 1}`))
	only := insert(str(`{"fila": {"timeout_ms": 700}}`))
	plain := insert(str(`{"x": 2}`))
	none := insert(nil)

	_, err = migrations.MigrateTo(ctx, db.Pool, 30)
	require.NoError(t, err)
	read := func(id int64) (metadata, policy *string) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT metadata::text, policy::text FROM fila_jobs WHERE id = $1::bigint`, id).
			Scan(&metadata, &policy))
		return metadata, policy
	}
	md, policy := read(mixed)
	require.JSONEq(t, `{"x": 1}`, *md)
	require.JSONEq(t, `{"timeout_ms": 1500, "retry_base_ms": 10, "retry_max_ms": 20}`, *policy)
	md, policy = read(only)
	require.Nil(t, md, "nothing left of the metadata")
	require.JSONEq(t, `{"timeout_ms": 700}`, *policy)
	md, policy = read(plain)
	require.JSONEq(t, `{"x": 2}`, *md)
	require.Nil(t, policy)
	md, policy = read(none)
	require.Nil(t, md)
	require.Nil(t, policy)

	_, err = migrations.Rollback(ctx, db.Pool, 29)
	require.NoError(t, err)
	readMetadata := func(id int64) (metadata *string) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT metadata::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&metadata))
		return metadata
	}
	require.JSONEq(t, `{"fila": {"timeout_ms": 1500, "retry_base_ms": 10, "retry_max_ms": 20}, "x": 1}`, *readMetadata(mixed))
	require.JSONEq(t, `{"fila": {"timeout_ms": 700}}`, *readMetadata(only))
	require.JSONEq(t, `{"x": 2}`, *readMetadata(plain))
	require.Nil(t, readMetadata(none))
}
