package runtime_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/fila-run/fila/internal/testdb"
	"github.com/fila-run/fila/internal/testrt"
	"github.com/fila-run/fila/runtime"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := testdb.DropTemplates(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	dropExampleDatabases()
	if code == 0 {
		if err := goleak.Find(
			// pgxpool's background health check of the shared admin pool in testdb.
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shared with the other packages' tests (internal/testrt).
var (
	newDB   = testrt.Migrated
	start   = testrt.Start
	waitFor = testrt.WaitFor
)

// newDB returns a migrated database of the test's own.
func testdbNew(t *testing.T) *testdb.DB { return testdb.New(t) }

// baseConfig is a runtime on db with a fast retry backoff for tests.
func baseConfig(t *testing.T, db *testdb.DB, kinds ...runtime.Kind) runtime.Config {
	return runtime.Config{
		DSN: db.DSN, ListenDSN: db.DirectDSN, Kinds: kinds,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		SafetyPoll: 10 * time.Minute,
		Logger:     zaptest.NewLogger(t),
	}
}

// jobState reads one job's state, attempts and last_error.
func jobState(t *testing.T, db *testdb.DB, id int64) (state string, attempts int, lastErr string) {
	t.Helper()
	var le *string
	err := db.Pool.QueryRow(context.Background(),
		"SELECT state, attempts, last_error FROM fila_jobs WHERE id = $1::bigint", id).Scan(&state, &attempts, &le)
	require.NoError(t, err)
	if le != nil {
		lastErr = *le
	}
	return state, attempts, lastErr
}

func countState(t *testing.T, db *testdb.DB, state string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM fila_jobs WHERE state = $1::text", state).Scan(&n))
	return n
}

// sampleLockWaits samples pg_stat_activity every 20 ms for sessions of db
// waiting on a row lock, until the returned stop is called; stop returns how
// many waits lasted three samples in a row. PostgreSQL may make even a SKIP
// LOCKED statement wait for the length of another single statement (it
// follows the update chain of a row claimed a moment before); a wait seen in
// three samples in a row (40 ms and more) is a real queue behind a lock.
func sampleLockWaits(t *testing.T, db *testdb.DB) (stop func() int) {
	t.Helper()
	ctx := context.Background()
	var lockWaits atomic.Int32
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		prev := map[int32]int{}
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			rows, err := db.Pool.Query(ctx, `SELECT pid, wait_event || ': ' || left(query, 60) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple', 'advisory')`)
			if err != nil {
				continue
			}
			cur := map[int32]int{}
			for rows.Next() {
				var pid int32
				var what string
				if rows.Scan(&pid, &what) == nil {
					cur[pid] = prev[pid] + 1
					if cur[pid] >= 3 {
						lockWaits.Add(1)
						t.Logf("session %d waits on a row lock: %s", pid, what)
					} else {
						t.Logf("session %d seen waiting on a row lock (%d samples): %s", pid, cur[pid], what)
					}
				}
			}
			rows.Close()
			prev = cur
		}
	}()
	return func() int {
		close(stopSampling)
		<-sampled
		return int(lockWaits.Load())
	}
}
