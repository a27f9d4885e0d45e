package listener

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/pgcluster"
)

// bigPayload is a job payload whose text, as pgoutput sends it, is far longer
// than the compressed tuple the WAL holds: a position computed from the
// message's length would run ahead of anything the server sent.
const bigPayload = `SELECT jsonb_build_object('blob', repeat('x', 200000))`

// TestWALConfirmsOnlyWhatTheServerSent: the source reports as flushed a
// position the server has actually sent, never beyond the end of its WAL.
// A fast shutdown waits until every walsender's client has confirmed exactly
// what was sent; a position beyond it holds the old primary in "shutting
// down" — a switchover that never completes.
func TestWALConfirmsOnlyWhatTheServerSent(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, StatusInterval: 100 * time.Millisecond})
	start(t, w)
	waitReady(t, w)
	_, pid := activeSlot(t, db)

	exec(t, db, "INSERT INTO fila_jobs (kind, payload) VALUES ('big', ("+bigPayload+"))")
	waitWake(t, w, "a wake for the large insert")
	waitCaughtUp(t, db)
	// A few more status reports, each one a later reply_time.
	var seen []time.Time
	require.Eventually(t, func() bool {
		var at *time.Time
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT reply_time FROM pg_stat_replication WHERE pid = $1`, pid).Scan(&at))
		if at != nil && (len(seen) == 0 || at.After(seen[len(seen)-1])) {
			seen = append(seen, *at)
		}
		return len(seen) >= 4
	}, 30*time.Second, 20*time.Millisecond, "the source sends status reports")
	var ahead bool
	var flushed, end string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT flush_lsn > pg_current_wal_flush_lsn(), flush_lsn::text, pg_current_wal_flush_lsn()::text
		 FROM pg_stat_replication WHERE pid = $1`, pid).Scan(&ahead, &flushed, &end))
	require.False(t, ahead, "the source confirmed %s, beyond the server's WAL end %s", flushed, end)
}

// TestWALLetsTheServerShutDown stops a PostgreSQL of the test's own in fast
// mode while the source streams from it, after an insert whose message is
// longer than its WAL record, and requires the shutdown to finish promptly.
func TestWALLetsTheServerShutDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := ownCluster(t, ctx, nil)
	dsn := cluster.DSN("postgres")
	pool := migratedPool(t, ctx, dsn)
	_, err := pool.Exec(ctx, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	require.NoError(t, err)

	w := newWAL(t, WALConfig{DSN: dsn, StatusInterval: 100 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})
	start(t, w)
	waitReady(t, w)
	_, err = pool.Exec(ctx, "INSERT INTO fila_jobs (kind, payload) VALUES ('big', ("+bigPayload+"))")
	require.NoError(t, err)
	waitWake(t, w, "a wake for the large insert")
	pool.Close()

	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- cluster.Stop(pgcluster.ModeFast) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
		t.Logf("fast shutdown took %v", time.Since(began))
	case <-time.After(30 * time.Second):
		t.Fatalf("fast shutdown still waiting after 30 s; server log:\n%s", cluster.LogTail())
	}
}
