package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fila-run/fila/internal/testdb"
)

func newListener(t *testing.T, cfg Config) *Listener {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger, _ = testLogger(t)
	}
	l, err := New(cfg)
	require.NoError(t, err)
	return l
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{DSN: "postgres://postgres@127.0.0.1:5432/postgres"}
	require.NoError(t, ok.Validate())

	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"empty DSN", func(c *Config) { c.DSN = "" }, "DSN"},
		{"unparsable DSN", func(c *Config) { c.DSN = "postgres://x:y@[::1" }, "DSN"},
		{"queue with a space", func(c *Config) { c.Queues = []string{"default", "bad queue"} }, "Queues"},
		{"empty queue", func(c *Config) { c.Queues = []string{""} }, "Queues"},
		{"queue too long for a channel", func(c *Config) { c.Queues = []string{strings.Repeat("q", 59)} }, "Queues"},
		{"ping interval too short", func(c *Config) { c.PingInterval = time.Millisecond }, "PingInterval"},
		{"negative ping timeout", func(c *Config) { c.PingTimeout = -time.Second }, "PingTimeout"},
		{"reconnect cap too long", func(c *Config) { c.ReconnectMax = time.Hour }, "ReconnectMax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := ok
			tc.edit(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.field)
			_, err = New(cfg)
			require.Error(t, err)
		})
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	cfg := Config{DSN: "postgres://localhost/x"}.WithDefaults()
	require.Equal(t, []string{DefaultQueue}, cfg.Queues)
	require.Equal(t, PingIntervalDefault, cfg.PingInterval)
	require.Equal(t, PingTimeoutDefault, cfg.PingTimeout)
	require.Equal(t, ReconnectMaxDefault, cfg.ReconnectMax)
	require.NotNil(t, cfg.Logger)
}

func TestCommittedInsertWakes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	raw := listenRaw(t, db, "fila_default")
	l := newListener(t, Config{DSN: db.DirectDSN})
	start(t, l)
	waitReady(t, l)
	require.True(t, l.Healthy())

	exec(t, db, "INSERT INTO fila_jobs (kind) VALUES ('email')")
	waitWake(t, l, "a wake for a committed insert")
	require.Len(t, raw.untilMarker(db, "fila_default"), 1)
	waitFor(t, waitTimeout, "the listener to count the insert and the marker", func() bool {
		return l.Stats().Notifications >= 2
	})
	require.Equal(t, uint64(2), l.Stats().Notifications)

	// A rolled-back insert sends nothing: the raw connection sees only the marker.
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), "INSERT INTO fila_jobs (kind) VALUES ('email')")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(context.Background()))
	require.Empty(t, raw.untilMarker(db, "fila_default"))
	waitFor(t, waitTimeout, "the listener to count the marker", func() bool {
		return l.Stats().Notifications >= 3
	})
	require.Equal(t, uint64(3), l.Stats().Notifications)
}

func TestBulkInsertNotifiesOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	raw := listenRaw(t, db, "fila_default")
	l := newListener(t, Config{DSN: db.DirectDSN})
	start(t, l)
	waitReady(t, l)

	exec(t, db, "INSERT INTO fila_jobs (kind) SELECT 'bulk' FROM generate_series(1, 10000)")
	waitWake(t, l, "a wake for a bulk insert")
	got := raw.untilMarker(db, "fila_default")
	require.Len(t, got, 1, "one 10 000-row statement must send one notification")

	// The payload is the smallest new id: a hint, never a claim.
	var minID int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT min(id) FROM fila_jobs").Scan(&minID))
	require.Equal(t, strconv.FormatInt(minID, 10), got[0])

	waitFor(t, waitTimeout, "the listener to count the insert and the marker", func() bool {
		return l.Stats().Notifications >= 2
	})
	require.Equal(t, uint64(2), l.Stats().Notifications)
}

// A job scheduled within the longest safety poll (10 minutes) notifies, so
// idle workers learn its due time at once and set their timers; one
// scheduled further ahead does not, and is learned by the safety poll.
func TestScheduledInsertNotifiesWithinTheLongestSafetyPoll(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	raw := listenRaw(t, db, "fila_default")
	l := newListener(t, Config{DSN: db.DirectDSN})
	start(t, l)
	waitReady(t, l)

	exec(t, db, "INSERT INTO fila_jobs (kind, run_at) VALUES ('later', now() + interval '1 hour')")
	exec(t, db, "INSERT INTO fila_jobs (kind, run_at) SELECT 'later', now() + interval '1 minute' FROM generate_series(1, 100)")
	got := raw.untilMarker(db, "fila_default")
	require.Len(t, got, 1, "one notification for the statement of jobs due within a minute, none for the job an hour ahead")
	waitFor(t, waitTimeout, "the listener to count the notification and the marker", func() bool {
		return l.Stats().Notifications >= 2
	})
	require.Equal(t, uint64(2), l.Stats().Notifications)
}

func TestListensOnEveryQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Queues: []string{"mail", "reports.daily", "mail"}})
	require.Equal(t, []string{"fila_mail", "fila_reports.daily"}, l.channels)
	start(t, l)
	waitReady(t, l)

	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('reports.daily', 'r')")
	waitWake(t, l, "a wake for the second queue")
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('mail', 'm')")
	waitWake(t, l, "a wake for the first queue")

	var chs []string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT array_agg(application_name) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
		ApplicationName).Scan(&chs))
	require.Len(t, chs, 1, "one dedicated connection")
}

func TestReconnectsAfterBackendTerminated(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	logger, logs := testLogger(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Logger: logger, ReconnectMax: 500 * time.Millisecond})
	start(t, l)
	waitReady(t, l)
	require.True(t, l.Healthy())
	drain(l.HealthChanges())

	ctx := context.Background()
	// From the administrative database: a database cannot refuse connections
	// to itself while connected.
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer func() { _ = admin.Close(ctx) }()
	pid := listenerPID(t, admin, db.Name)

	// Refuse new connections first, so the unhealthy period lasts until the
	// test ends it, and the listener has to retry.
	dbIdent := pgx.Identifier{db.Name}.Sanitize()
	_, err = admin.Exec(ctx, "ALTER DATABASE "+dbIdent+" ALLOW_CONNECTIONS false")
	require.NoError(t, err)
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&terminated))
	require.True(t, terminated)

	waitFor(t, waitTimeout, "Healthy to turn false", func() bool { return !l.Healthy() })
	select {
	case <-l.HealthChanges():
	default:
		t.Fatal("HealthChanges was not signalled when the connection was lost")
	}
	waitFor(t, waitTimeout, "a failed reconnect attempt", func() bool {
		return logs.FilterMessage("connect failed; retrying").Len() >= 2
	})
	require.False(t, l.Healthy())
	require.NotEmpty(t, l.Stats().LastError)
	drain(l.Wakes())

	_, err = admin.Exec(ctx, "ALTER DATABASE "+dbIdent+" ALLOW_CONNECTIONS true")
	require.NoError(t, err)
	waitFor(t, waitTimeout, "Healthy to turn true again", l.Healthy)
	select {
	case <-l.HealthChanges():
	default:
		t.Fatal("HealthChanges was not signalled on recovery")
	}
	waitWake(t, l, "the catch-up wake after reconnecting")
	require.Equal(t, uint64(1), l.Stats().Reconnects)
	require.Equal(t, 1, logs.FilterMessage("reconnected").Len())

	require.NotEqual(t, pid, listenerPID(t, admin, db.Name))

	exec(t, db, "INSERT INTO fila_jobs (kind) VALUES ('after')")
	waitWake(t, l, "a wake for an insert after reconnecting")
}

func TestServerDownRetriesWithoutHotLoop(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	logger, logs := testLogger(t)
	l := newListener(t, Config{
		DSN:    fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2", port),
		Logger: logger,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	// Judged by the delays it logs, not by how many attempts fit in a
	// window (a loaded machine makes fewer): the backoff starts at 100 ms
	// and grows by half, ±50% jitter, so the fifth delay is at least 253 ms
	// whatever the jitter, where a retry at a fixed pace or a hot loop
	// would log the first's (at most 150 ms) again. And it waits what it
	// says: the fifth attempt comes no sooner than the four delays before it.
	failed := func() []observer.LoggedEntry { return logs.FilterMessage("connect failed; retrying").All() }
	require.Eventually(t, func() bool { return len(failed()) >= 5 }, 60*time.Second, 10*time.Millisecond, "it must keep retrying")
	entries := failed()
	delay := func(i int) time.Duration {
		d, ok := entries[i].ContextMap()["next_delay"].(time.Duration)
		require.True(t, ok, "attempt %d logs its next_delay: %v", i+1, entries[i].ContextMap())
		return d
	}
	require.Greater(t, delay(4), 150*time.Millisecond, "it must back off, not retry at a fixed pace or spin")
	var waited time.Duration
	for i := range 4 {
		waited += delay(i)
	}
	require.GreaterOrEqual(t, entries[4].Time.Sub(entries[0].Time), waited-10*time.Millisecond,
		"the fifth attempt came before the delays logged had passed")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
	// The first delay is InitialInterval's, jittered: at most 150 ms.
	first := logs.FilterMessage("connect failed; retrying").All()[0].ContextMap()["next_delay"]
	require.LessOrEqual(t, first, 150*time.Millisecond, "the first reconnect waits about 100 ms")
	require.False(t, l.Healthy())
	require.NotEmpty(t, l.Stats().LastError)
	select {
	case <-l.Ready():
		t.Fatal("Ready closed without a connection")
	default:
	}
}

func TestRefusesPooler(t *testing.T) {
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
	l := newListener(t, Config{DSN: testdb.WithDatabase(t, pb, db.Name)})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = l.Run(ctx)
	require.Error(t, err, "Run must refuse the pooler (last error: %s)", l.Stats().LastError)
	require.True(t, errors.Is(err, ErrPooler), "got %v", err)
	require.Contains(t, err.Error(), "directly")
	require.False(t, l.Healthy())
}

func TestRunRefusesSecondConcurrentRun(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	l := newListener(t, Config{DSN: db.DirectDSN})
	start(t, l)
	waitReady(t, l)
	require.Error(t, l.Run(context.Background()))
}

// listenerPID finds the listener's backend in database name.
func listenerPID(t *testing.T, admin *pgx.Conn, name string) int32 {
	t.Helper()
	var pid int32
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		name, ApplicationName).Scan(&pid))
	return pid
}

func TestIdleHealthChecksKeepListening(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	logger, logs := testLogger(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Logger: logger, PingInterval: PingIntervalMin})
	start(t, l)
	waitReady(t, l)

	// Several idle timeouts in a row: each interrupts a read, pings, and the
	// connection must go on reading notifications afterwards.
	waitFor(t, waitTimeout, "three answered health checks", func() bool {
		return logs.FilterMessage("health check answered").Len() >= 3
	})
	exec(t, db, "INSERT INTO fila_jobs (kind) VALUES ('idle')")
	waitWake(t, l, "a wake after idle health checks")
	require.True(t, l.Healthy())
	require.Zero(t, l.Stats().Reconnects)
	require.Empty(t, l.Stats().LastError)
}
