package migrations_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/migrations"
)

// TestAdvisoryLockKeys checks that every advisory lock the SQL of the
// migrations and of schema.sql takes uses a key named in locks.go, in the
// key space that constant is meant for, and that each constant of a pair
// key is used where it says.
func TestAdvisoryLockKeys(t *testing.T) {
	t.Parallel()
	pair := map[int64]string{
		int64(migrations.LockConcurrencyKey): "LockConcurrencyKey",
		int64(migrations.LockQueueSleep):     "LockQueueSleep",
	}
	// pg_advisory_lock, pg_try_advisory_xact_lock_shared, ...: the first
	// argument, and whether a second follows (a pair key).
	call := regexp.MustCompile(`pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?\(\s*([^,)]+)\s*(,)?`)
	files, err := filepath.Glob("*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	used := map[string]bool{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range call.FindAllStringSubmatch(string(text), -1) {
			key, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err, "%s: %s takes a key that is not a literal: name it in locks.go", f, m[0])
			require.NotEmpty(t, m[2], "%s: %s takes a single key: Fila's SQL locks (classid, objid) pairs, see locks.go", f, m[0])
			name, ok := pair[key]
			require.True(t, ok, "%s: %s uses key %d, which locks.go does not name", f, m[0], key)
			used[name] = true
		}
	}
	for _, name := range pair {
		require.True(t, used[name], "%s is named in locks.go but no SQL takes it", name)
	}
}
