package listener

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// newWALDB returns a migrated database whose insert trigger is disabled, so
// any wake can only come through logical replication. It skips the test when
// the server cannot do logical replication.
func newWALDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := newDB(t)
	var walLevel string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&walLevel))
	if walLevel != "logical" {
		testdb.Missing(t, "wal_level is %q on the test server; scripts/setup.sh sets it to logical", walLevel)
	}
	exec(t, db, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	// Runs after the source has stopped and before the database is dropped,
	// which a slot still held by an exiting walsender would refuse.
	t.Cleanup(func() {
		waitFor(t, waitTimeout, "no wake slot left", func() bool { return slotCount(t, db) == 0 })
	})
	return db
}

func newWAL(t *testing.T, cfg WALConfig) *WAL {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger, _ = testLogger(t)
	}
	w, err := NewWAL(cfg)
	require.NoError(t, err)
	return w
}

// activeSlot returns the name and walsender pid of the database's wake slot.
func activeSlot(t *testing.T, db *testdb.DB) (string, int32) {
	t.Helper()
	var name string
	var pid int32
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT slot_name, active_pid FROM pg_replication_slots
		 WHERE database = current_database() AND slot_name LIKE 'fila\_wake\_%' AND active`).Scan(&name, &pid))
	return name, pid
}

func slotCount(t *testing.T, db *testdb.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND slot_name LIKE 'fila\_wake\_%'`).Scan(&n))
	return n
}

// waitCaughtUp waits until the slot has confirmed everything written so far:
// the source has then handled every earlier transaction, and its status
// reports keep the slot from retaining WAL.
func waitCaughtUp(t *testing.T, db *testdb.DB) {
	t.Helper()
	var target string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&target))
	waitFor(t, waitTimeout, "the slot to confirm "+target, func() bool {
		var done bool
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT coalesce(bool_and(confirmed_flush_lsn >= $1::pg_lsn), false) FROM pg_replication_slots
			 WHERE database = current_database() AND slot_name LIKE 'fila\_wake\_%'`, target).Scan(&done))
		return done
	})
}

func TestWALValidate(t *testing.T) {
	t.Parallel()
	ok := WALConfig{DSN: "postgres://postgres@127.0.0.1:5432/postgres"}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name  string
		edit  func(*WALConfig)
		field string
	}{
		{"empty DSN", func(c *WALConfig) { c.DSN = "" }, "DSN"},
		{"bad queue", func(c *WALConfig) { c.Queues = []string{"a;b"} }, "Queues"},
		{"status interval too long", func(c *WALConfig) { c.StatusInterval = time.Minute }, "StatusInterval"},
		{"slot timeout too short", func(c *WALConfig) { c.SlotTimeout = time.Millisecond }, "SlotTimeout"},
		{"ping timeout negative", func(c *WALConfig) { c.PingTimeout = -1 }, "PingTimeout"},
		{"reconnect cap too short", func(c *WALConfig) { c.ReconnectMax = time.Millisecond }, "ReconnectMax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tc.edit(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.field)
			_, err = NewWAL(cfg)
			require.Error(t, err)
		})
	}
}

func TestWALWakesOnInsertWithoutTrigger(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, StatusInterval: 200 * time.Millisecond})
	start(t, w)
	waitReady(t, w)
	require.True(t, w.Healthy())
	require.Equal(t, 1, slotCount(t, db))

	exec(t, db, "INSERT INTO fila_jobs (kind) VALUES ('wal')")
	waitWake(t, w, "a wake for an insert through WAL")
	waitCaughtUp(t, db)
	require.Equal(t, uint64(1), w.Stats().Notifications)

	// One wake per transaction however many rows; none for other queues,
	// rolled-back inserts, or updates.
	exec(t, db, "INSERT INTO fila_jobs (kind) SELECT 'bulk' FROM generate_series(1, 10000)")
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('elsewhere', 'x')")
	exec(t, db, "UPDATE fila_jobs SET priority = 1")
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), "INSERT INTO fila_jobs (kind) VALUES ('rolled back')")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(context.Background()))
	waitCaughtUp(t, db)
	require.Equal(t, uint64(2), w.Stats().Notifications)
	waitWake(t, w, "a wake for the bulk insert")
}

func TestWALReconnectsAfterWalsenderTerminated(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, ReconnectMax: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitReady(t, w)
	drain(w.HealthChanges())

	slot, pid := activeSlot(t, db)
	var terminated bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&terminated))
	require.True(t, terminated)

	waitFor(t, waitTimeout, "a reconnect", func() bool { return w.Stats().Reconnects == 1 && w.Healthy() })
	select {
	case <-w.HealthChanges():
	default:
		t.Fatal("HealthChanges was not signalled")
	}
	waitWake(t, w, "the catch-up wake after reconnecting")
	waitFor(t, waitTimeout, "the old slot to be dropped", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n))
		return n == 0
	})
	newSlot, _ := activeSlot(t, db)
	require.NotEqual(t, slot, newSlot)

	exec(t, db, "INSERT INTO fila_jobs (kind) VALUES ('after')")
	waitWake(t, w, "a wake for an insert after reconnecting")

	// Stopping leaves no slot behind to retain WAL.
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
	done <- nil // for the deferred receive
	require.False(t, w.Healthy())
	waitFor(t, waitTimeout, "no wake slot left", func() bool { return slotCount(t, db) == 0 })
}

func TestWALSlotCreationTimesOut(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	ctx := context.Background()

	// A transaction with an xid holds slot creation until it ends.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('held')")
	require.NoError(t, err)

	logger, logs := testLogger(t)
	// Any transaction on the instance longer than SlotTimeout also holds a
	// creation, and other tests run at the same time: retry often, and allow
	// readiness more time than usual once the holder is gone.
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, Logger: logger, SlotTimeout: time.Second, ReconnectMax: 500 * time.Millisecond})
	start(t, w)
	waitFor(t, waitTimeout, "a slot creation to time out", func() bool {
		for _, e := range logs.FilterMessage("connect failed; retrying").All() {
			if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, "SlotTimeout") {
				return true
			}
		}
		return false
	})
	require.Contains(t, w.Stats().LastError, "long-running transactions")
	select {
	case <-w.Ready():
		t.Fatal("ready while the slot could not be created")
	default:
	}

	require.NoError(t, holder.Commit(ctx))
	select {
	case <-w.Ready():
	case <-time.After(4 * waitTimeout):
		t.Fatalf("not ready after the holding transaction ended; last error: %s", w.Stats().LastError)
	}
	require.Equal(t, 1, slotCount(t, db), "cancelled attempts leave no slot behind")
}

func TestWALRefusesRoleWithoutReplication(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "fila_norepl_" + hex.EncodeToString(b[:])
	exec(t, db, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	dsn := strings.Replace(db.DirectDSN, "postgres@", role+"@", 1)
	require.NotEqual(t, db.DirectDSN, dsn)

	w := newWAL(t, WALConfig{DSN: dsn})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := w.Run(ctx)
	require.True(t, errors.Is(err, ErrReplicationPrivilege), "got %v", err)
	require.Contains(t, err.Error(), "ALTER ROLE")
}

func TestWALRefusesPooler(t *testing.T) {
	t.Parallel()
	const pgbouncerAddr = "127.0.0.1:6432"
	c, err := net.DialTimeout("tcp", pgbouncerAddr, time.Second)
	if err != nil {
		testdb.Missing(t, "no PgBouncer answers at %s (scripts/setup.sh starts one): %v", pgbouncerAddr, err)
	}
	_ = c.Close()
	pb := os.Getenv("FILA_TEST_PGBOUNCER_URL")
	if pb == "" {
		pb = "postgres://postgres@" + pgbouncerAddr + "/postgres"
	}
	db := newDB(t)
	w := newWAL(t, WALConfig{DSN: testdb.WithDatabase(t, pb, db.Name)})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = w.Run(ctx)
	require.True(t, errors.Is(err, ErrPooler), "got %v (last error: %s)", err, w.Stats().LastError)
	require.Contains(t, err.Error(), "directly")
}

// TestWALRefusesWALLevelReplica needs a server whose wal_level is below
// logical, so it starts a throwaway cluster rather than disturb the shared one.
func TestWALRefusesWALLevelReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := ownCluster(t, ctx, map[string]string{"wal_level": "replica"})

	w := newWAL(t, WALConfig{DSN: cluster.DSN("postgres")})
	err := w.Run(ctx)
	require.True(t, errors.Is(err, ErrWALLevel), "got %v", err)
	require.Contains(t, err.Error(), "set wal_level = logical and restart PostgreSQL")
}
