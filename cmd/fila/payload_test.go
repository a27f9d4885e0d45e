package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testdb"
)

// TestEnqueueRefusesPayloadsOverTheLimits: fila enqueue accepted a 20 KB
// array nested 9 999 deep (which every page and command then printed
// indented, 200 MB) and a payload of any size. It now refuses both, naming
// the table's limit, which fila jobs limits shows and sets.
func TestEnqueueRefusesPayloadsOverTheLimits(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	dir := t.TempDir()
	deep := filepath.Join(dir, "deep.json")
	require.NoError(t, os.WriteFile(deep, []byte(strings.Repeat("[", 9999)+strings.Repeat("]", 9999)), 0o600))
	big := `{"blob": "` + strings.Repeat("x", 2<<20) + `"}`
	huge := filepath.Join(dir, "huge.json")
	require.NoError(t, os.WriteFile(huge, []byte(`"`+strings.Repeat("z", 20<<20)+`"`), 0o600))
	count := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fila_jobs").Scan(&n))
		return n
	}

	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"--payload", "@" + deep}, "--payload @" + deep + " nests arrays and objects 9999 deep: at most 64 are allowed"},
		{big, []string{"--payload", "-"}, "--payload - (stdin) is 2097164 bytes as JSON text: at most 1048576 are allowed"},
		{"", []string{"--payload", "@" + huge}, "holds more than 8454144 bytes, far over the table's payload limit of 1048576 bytes"},
	} {
		out, errOut, code := filaStdin(t, db, c.stdin, append([]string{"enqueue", "--kind", "noop"}, c.args...)...)
		require.Equal(t, 1, code, "%v: %s", c.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, c.want)
		require.Contains(t, errOut, "fila jobs limits")
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %s", errOut)
	}
	require.Zero(t, count())

	out, errOut, code := fila(t, db, "jobs", "limits")
	require.Zero(t, code, errOut)
	require.Equal(t, "a payload may take at most 1048576 bytes as JSON text and nest at most 64 deep (checked by the table's trigger fila_jobs_payload_limits on every insert)\n", out)
	out, errOut, code = fila(t, db, "jobs", "limits", "--max-payload-bytes", "4194304", "--json")
	require.Zero(t, code, errOut)
	var l struct {
		Enforced bool `json:"enforced"`
		MaxBytes int  `json:"max_payload_bytes"`
		MaxDepth int  `json:"max_payload_depth"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, struct {
		Enforced bool `json:"enforced"`
		MaxBytes int  `json:"max_payload_bytes"`
		MaxDepth int  `json:"max_payload_depth"`
	}{true, 4194304, 64}, l)
	out, errOut, code = filaStdin(t, db, big, "enqueue", "--kind", "noop", "--payload", "-")
	require.Zero(t, code, errOut)
	require.Equal(t, 1, count())
	_, errOut, code = fila(t, db, "enqueue", "--kind", "noop", "--payload", "@"+deep)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "9999 deep: at most 64")

	_, errOut, code = fila(t, db, "jobs", "limits", "--max-payload-depth", "0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--max-payload-depth 0 out of range: allowed 1 to 10000")
	_, errOut, code = fila(t, db, "jobs", "limits", "--max-payload-bytes", "1000")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--max-payload-bytes 1000 out of range: allowed 1024 to 268435455")
}

// filaOut runs the binary and returns its stdout, which may be large, and
// its exit code; its stderr must be empty.
func filaOut(t *testing.T, db *testdb.DB, args ...string) (stdout string, code int) {
	t.Helper()
	cmd := filaCmd(db, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.Empty(t, e.String(), "fila %v", args)
	return o.String(), code
}

// TestHugeAndDeepPayloadsOnEveryCommand: rows written before the payload
// limits (here with the trigger off) — a 20 KB array nested 9 999 deep, and
// a 20 MB payload — are listed, shown capped, printed whole on request,
// and retried. fila jobs show printed the first as 200 MB of indentation.
func TestHugeAndDeepPayloadsOnEveryCommand(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	// As before the limits (on a database without them, nothing to turn off).
	_, err := db.Pool.Exec(ctx, setPayloadTrigger("DISABLE"))
	require.NoError(t, err)
	insert := func(payload string) (int64, int64) {
		var id, size int64
		require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, payload)
VALUES ('big', 'dead', 1, 1, now(), $1::text::jsonb) RETURNING id, octet_length(payload::text)`, payload).Scan(&id, &size))
		return id, size
	}
	deep, deepSize := insert(strings.Repeat("[", 9999) + strings.Repeat("]", 9999))
	var items strings.Builder
	items.WriteString(`[`)
	for i := range 230000 {
		if i > 0 {
			items.WriteString(", ")
		}
		fmt.Fprintf(&items, `{"id": %d, "name": "item %d", "tags": ["a", "b"]}`, i, i)
	}
	items.WriteString(`]`)
	huge, hugeSize := insert(items.String())
	require.Greater(t, hugeSize, int64(10<<20))
	_, err = db.Pool.Exec(ctx, setPayloadTrigger("ENABLE"))
	require.NoError(t, err)

	for _, c := range []struct {
		id   int64
		size int64
	}{{deep, deepSize}, {huge, hugeSize}} {
		out, code := filaOut(t, db, "jobs", "show", fmt.Sprint(c.id))
		require.Zero(t, code)
		require.Less(t, len(out), 70<<10, "the text shows a bounded part")
		require.Contains(t, out, fmt.Sprintf("fila jobs show --payload %d", c.id))

		out, code = filaOut(t, db, "jobs", "show", "--payload", fmt.Sprint(c.id))
		require.Zero(t, code)
		require.Equal(t, c.size+1, int64(len(out)), "the payload whole, and a newline")
		var same bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT payload = $2::text::jsonb FROM fila_jobs WHERE id = $1`, c.id, out).Scan(&same))
		require.True(t, same)

		out, code = filaOut(t, db, "jobs", "show", "--json", fmt.Sprint(c.id))
		require.Zero(t, code)
		var shown struct {
			ID      int64           `json:"id"`
			Payload json.RawMessage `json:"payload"`
			Errors  []any           `json:"errors"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &shown))
		require.Equal(t, c.id, shown.ID)
		require.Equal(t, c.size, int64(len(shown.Payload)), "the payload whole, not indented")
		require.NotNil(t, shown.Errors)
	}
	for _, args := range [][]string{{"jobs", "list"}, {"jobs", "list", "--json"}, {"stats"}} {
		out, code := filaOut(t, db, args...)
		require.Zero(t, code, "%v", args)
		require.Less(t, len(out), 10<<10, "%v", args)
	}
	out, errOut, code := fila(t, db, "jobs", "retry", "--state", "dead")
	require.Zero(t, code, errOut)
	require.Equal(t, fmt.Sprintf("retried 2 dead jobs: %d, %d\n", deep, huge), out)
}

// setPayloadTrigger is a statement that enables or disables the payload
// limits trigger where there is one.
func setPayloadTrigger(state string) string {
	return `DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'fila_jobs_payload_limits') THEN
        ALTER TABLE fila_jobs ` + state + ` TRIGGER fila_jobs_payload_limits;
    END IF;
END $$`
}
