package listener

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/migrations"
)

// execIn runs sql in a transaction whose search_path is schema, as the
// connections of a runtime with Config.Schema have it.
func execIn(t *testing.T, db *testdb.DB, schema, sql string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	}))
}

// TestSchemaChannels: the triggers of Fila's tables in a named schema
// notify that schema's channels, an insert's and an update's alike, and
// public's keep the old ones; a listener with a Schema hears its own
// schema's notifications only.
func TestSchemaChannels(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	for _, s := range []string{"app_a", "app_b"} {
		_, err := migrations.MigrateIn(ctx, db.Pool, s, migrations.Latest())
		require.NoError(t, err)
		execIn(t, db, s, `INSERT INTO fila_sleepers (queue, worker) VALUES ('*', 'listener-test')`)
	}
	chans := map[string]string{"public": "fila_default", "app_a": "fila:app_a:default", "app_b": "fila:app_b:default"}
	raws := map[string]*rawListener{}
	for s, ch := range chans {
		raws[s] = listenRaw(t, db, ch)
	}
	only := func(schema, what string) {
		t.Helper()
		for s, ch := range chans {
			got := raws[s].untilMarker(db, ch)
			if s == schema {
				require.Len(t, got, 1, "%s: %s's channel %s", what, s, ch)
			} else {
				require.Empty(t, got, "%s: %s's channel %s", what, s, ch)
			}
		}
	}
	execIn(t, db, "app_a", `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	only("app_a", "an insert into app_a")
	execIn(t, db, "app_b", `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	only("app_b", "an insert into app_b")
	exec(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	only("public", "an insert into public")
	execIn(t, db, "app_a", `INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + interval '1 day')`)
	only("", "an insert due tomorrow")
	execIn(t, db, "app_a", `UPDATE fila_jobs SET run_at = now() WHERE kind = 'later'`)
	only("app_a", "an update that makes app_a's job due")

	l := newListener(t, Config{DSN: db.DirectDSN, Schema: "app_a"})
	start(t, l)
	waitReady(t, l)
	execIn(t, db, "app_b", `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	exec(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	// Notifications arrive in commit order: the marker comes after them.
	exec(t, db, `SELECT pg_notify('fila:app_a:default', 'marker')`)
	waitWake(t, l, "the marker")
	waitFor(t, waitTimeout, "the listener to count the marker", func() bool { return l.Stats().Notifications >= 1 })
	require.Equal(t, uint64(1), l.Stats().Notifications, "only the marker: app_b's and public's inserts reached no channel of app_a's")
	execIn(t, db, "app_a", `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	waitWake(t, l, "app_a's insert")
	require.Equal(t, uint64(2), l.Stats().Notifications)

	_, err := New(Config{DSN: db.DirectDSN, Schema: "app-a"})
	require.ErrorContains(t, err, `listener: Schema: schema name "app-a" may contain only`)
}

// TestWALSchema: a WAL source with a Schema streams that schema's own
// publication and follows that schema's logical messages only: inserts
// and updates in another schema, or in public, wake nothing.
func TestWALSchema(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	ctx := context.Background()
	for _, s := range []string{"app_a", "app_b"} {
		_, err := migrations.MigrateIn(ctx, db.Pool, s, migrations.Latest())
		require.NoError(t, err)
		execIn(t, db, s, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	}
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, Schema: "app_a", StatusInterval: 200 * time.Millisecond})
	start(t, w)
	waitReady(t, w)
	var tables []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(schemaname || '.' || tablename) FROM pg_publication_tables WHERE pubname = 'fila_jobs_inserts_app_a'`).Scan(&tables))
	require.Equal(t, []string{"app_a.fila_jobs"}, tables)

	execIn(t, db, "app_b", `INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + interval '1 day')`)
	execIn(t, db, "app_b", `UPDATE fila_jobs SET run_at = now() WHERE kind = 'later'`)
	exec(t, db, `INSERT INTO fila_jobs (kind) VALUES ('k')`)
	waitCaughtUp(t, db)
	require.Equal(t, uint64(0), w.Stats().Notifications, "app_b's and public's inserts and updates woke nothing")

	execIn(t, db, "app_a", `INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + interval '1 day')`)
	waitWake(t, w, "app_a's insert")
	execIn(t, db, "app_a", `UPDATE fila_jobs SET run_at = now() WHERE kind = 'later'`)
	waitWake(t, w, "app_a's update, by its logical message")
	waitCaughtUp(t, db)
	require.Equal(t, uint64(2), w.Stats().Notifications)
}
