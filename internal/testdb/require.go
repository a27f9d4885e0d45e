package testdb

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns a missing prerequisite
// into a failure. scripts/test.sh sets it to "all", so the suite cannot go
// green by skipping what it was meant to prove.
const RequireEnv = "FILA_TEST_REQUIRE"

// Required reports whether missing prerequisites fail tests instead of
// skipping them.
func Required() bool { return os.Getenv(RequireEnv) == "all" }

// Missing ends a test whose prerequisite (a PgBouncer, wal_level=logical,
// PostgreSQL binaries for a cluster of its own) is not there: it skips when
// run by hand, and fails under the test command (FILA_TEST_REQUIRE=all).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("missing prerequisite (%s=all): %s", RequireEnv, msg)
	}
	t.Skip(msg)
}
