package listener

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A database default of ten milliseconds, meant for an application's
// statements, does not reach the sessions a source opens, unless its DSN
// sets a timeout itself.
func TestSourcesLiftTheDatabasesStatementTimeout(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	db.SetDefault(t, "statement_timeout", "10ms")
	ctx := context.Background()

	// timeoutOf opens a session with cfg, reads its statement_timeout and,
	// when that is lifted, runs a statement longer than the default.
	timeoutOf := func(t *testing.T, cfg *pgconn.Config) string {
		t.Helper()
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		defer conn.Close(ctx)
		rows, err := conn.Exec(ctx, "SELECT current_setting('statement_timeout')").ReadAll()
		require.NoError(t, err)
		got := string(rows[0].Rows[0][0])
		if got == "0" {
			_, err = conn.Exec(ctx, "SELECT pg_sleep(0.05)").ReadAll()
			require.NoError(t, err, "a statement longer than the database's default")
		}
		return got
	}

	with := func(param string) string {
		if strings.Contains(db.DirectDSN, "?") {
			return db.DirectDSN + "&" + param
		}
		return db.DirectDSN + "?" + param
	}
	for _, tc := range []struct{ name, dsn, want string }{
		{"the database's default lifted", db.DirectDSN, "0"},
		{"the DSN's parameter kept", with("statement_timeout=7000"), "7s"},
		{"the DSN's options kept", with("options=-c%20statement_timeout%3D5000"), "5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(Config{DSN: tc.dsn})
			require.NoError(t, err)
			cfg, err := l.connConfig()
			require.NoError(t, err)
			require.Equal(t, tc.want, timeoutOf(t, &cfg.Config), "listener")

			w, err := NewWAL(WALConfig{DSN: tc.dsn})
			require.NoError(t, err)
			sqlCfg, replCfg, err := w.connConfigs()
			require.NoError(t, err)
			require.Equal(t, tc.want, timeoutOf(t, &sqlCfg.Config), "WAL source's checks")
			// A replication session answers only replication commands and
			// SHOW: that it starts at all under the parameter is what counts.
			conn, err := pgconn.ConnectConfig(ctx, replCfg)
			require.NoError(t, err, "replication session")
			rows, err := conn.Exec(ctx, "SHOW statement_timeout").ReadAll()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(rows[0].Rows[0][0]), "replication session")
			require.NoError(t, conn.Close(ctx))
		})
	}

	// And a listener connects, and wakes, under that default.
	l := newListener(t, Config{DSN: db.DirectDSN})
	start(t, l)
	waitReady(t, l)
	cfg, err := l.connConfig()
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('email')")
	require.NoError(t, err)
	waitWake(t, l, "a wake for an insert under a 10 ms default")
}

// A database default of idle_session_timeout, shorter than the listener's
// checks, does not end its session: it stays connected, without a
// reconnect, and wakes on an insert made after several such timeouts.
func TestListenerLiftsTheDatabasesIdleSessionTimeout(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	db.NeedsVersion(t, 14, "idle_session_timeout")
	db.SetDefault(t, "idle_session_timeout", "200ms")
	ctx := context.Background()
	l := newListener(t, Config{DSN: db.DirectDSN, PingInterval: 5 * time.Second})
	start(t, l)
	waitReady(t, l)
	time.Sleep(time.Second) // five of the default's timeouts
	require.True(t, l.Healthy())
	require.Zero(t, l.Stats().Reconnects, "the listener's session was ended while it waited")

	// The test's own session is subject to the default: a fresh one.
	conn, err := pgx.Connect(ctx, db.DirectDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "INSERT INTO fila_jobs (kind) VALUES ('email')")
	require.NoError(t, err)
	waitWake(t, l, "a wake for an insert after the idle timeouts")
	require.Zero(t, l.Stats().Reconnects)
}
