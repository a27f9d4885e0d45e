package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// evil holds what a terminal acts on: ESC [ 2 J clears the screen, OSC 0
// sets the window title, a carriage return overwrites the line, U+009B is
// an 8-bit CSI, U+202E reverses what follows, DEL, BEL and a NUL-less C0.
const evil = "\x1b[2J\x1b]0;pwned\x07\r\u009b31m\u202e\x7f\x01"

// requireTerminalSafe fails if out holds any character a terminal could
// take for a command: C0 controls but newline and tab, DEL, C1 controls,
// bidirectional overrides.
func requireTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		bad := (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
			r == '\u202e' || r == utf8.RuneError
		require.False(t, bad, "%s: byte %d is %U, raw: %q", what, i, r, out)
	}
}

// TestTableTextIsPrintedEscaped: kinds, errors, payloads and worker names
// are written by whoever can write a row, and fila jobs list, jobs show and
// stats printed them raw, so a job could clear or rewrite an operator's
// terminal. Every control character comes out escaped, in text and JSON.
func TestTableTextIsPrintedEscaped(t *testing.T) {
	t.Parallel()
	db := migrated(t)
	ctx := context.Background()
	kind := "mail" + evil
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
INSERT INTO fila_jobs (kind, state, attempts, max_attempts, finished_at, started_at, last_error, errors, payload)
VALUES ($1::text, 'dead', 1, 1, now(), now(), $2::text,
        jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $2::text)),
        jsonb_build_object('to', $2::text, $2::text, 1))
RETURNING id`, kind, "smtp said no"+evil+"\nsecond line"+evil).Scan(&id))
	_, err := db.Pool.Exec(ctx, `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, wake_error)
VALUES ($1::text, $1::text, 1, '{default}', ARRAY[$1::text], 'notify', 'down', $1::text)`, "w"+evil)
	require.NoError(t, err)

	for _, args := range [][]string{
		{"jobs", "list"}, {"jobs", "list", "--json"}, {"jobs", "list", "--state", "dead"},
		{"jobs", "show", fmt.Sprint(id)}, {"jobs", "show", "--json", fmt.Sprint(id)},
		{"stats"}, {"stats", "--json"}, {"stats", "--check", "--max-dead", "0"},
	} {
		out, errOut, code := fila(t, db, args...)
		if args[0] == "stats" && len(args) > 1 && args[1] == "--check" {
			require.Equal(t, 1, code, errOut)
		} else {
			require.Zero(t, code, errOut)
		}
		requireTerminalSafe(t, strings.Join(args, " "), out)
		requireTerminalSafe(t, strings.Join(args, " ")+" (stderr)", errOut)
		if strings.Contains(strings.Join(args, " "), "--json") {
			var v any
			require.NoError(t, json.Unmarshal([]byte(out), &v), "%v: still JSON", args)
			require.Contains(t, out, `\u001b[2J`, "%v", args)
			require.Contains(t, out, `\u009b`, "%v", args)
		} else {
			require.Contains(t, out, `\x1b[2J`, "%v: shown escaped", args)
		}
	}
	out, _, _ := fila(t, db, "jobs", "show", fmt.Sprint(id))
	require.Contains(t, out, `mail\x1b[2J\x1b]0;pwned\x07\r\u009b31m\u202e\x7f\x01`)
	require.Contains(t, out, "    second line\\x1b[2J", "an error keeps its lines, each escaped")

	// JSON output decodes to the very strings in the table.
	out, _, _ = fila(t, db, "jobs", "list", "--json")
	var listed []struct {
		Kind string `json:"kind"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Equal(t, kind, listed[0].Kind)
}

func TestTermEscapes(t *testing.T) {
	t.Parallel()
	require.Equal(t, "plain café ✓", termLine("plain café ✓"))
	require.Equal(t, `a\x1b[2Jb\r\nc\td\x7f\u009b\u202e\xff`, termLine("a\x1b[2Jb\r\nc\td\x7f\u009b\u202e\xff"))
	require.Equal(t, "a\\x1b\nb\tc\\r", termText("a\x1b\nb\tc\r"))
	require.Equal(t, `C:\temp`, termLine(`C:\temp`), "a backslash stays")

	in := []byte(`{"a":"x` + "\u009b\u007f\u202e" + `é","b":"\u001b"}`)
	out := jsonTerminalSafe(in)
	require.Equal(t, `{"a":"x\u009b\u007f\u202eé","b":"\u001b"}`, string(out))
	var a, b map[string]string
	require.NoError(t, json.Unmarshal(in, &a))
	require.NoError(t, json.Unmarshal(out, &b))
	require.Equal(t, a, b)

	// Written a byte at a time, a rune split across writes is still seen whole.
	var sb strings.Builder
	w := &terminalJSON{w: &sb}
	for i := range in {
		_, err := w.Write(in[i : i+1])
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.Equal(t, string(out), sb.String())
}
