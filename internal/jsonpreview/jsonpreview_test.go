package jsonpreview_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/jsonpreview"
)

var wide = jsonpreview.Limits{MaxBytes: 1 << 20, MaxDepth: 100}

func TestIndentLikeJSONIndent(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{"a": 1, "b": [1, 2, {"c": null, "d": []}], "e": {}, "f": "x, y: [z]", "g": "q\"uo\\\"te"}`,
		`[]`, `{}`, `7`, `"just a string"`, `[[[]], [{}], {"k": [true, false]}]`,
		"{\n \"a\" :\t[ 1 ,2 ] ,\"b\" : { } , \"c\": [ ] }",
		`{"é": "ü😀", "k": -1.5e-3}`,
	} {
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, []byte(src), "> ", "  "), src)
		got := jsonpreview.Indent([]byte(src), true, "> ", "  ", wide)
		require.Equal(t, want.String(), got.Text, src)
		require.False(t, got.Cut, src)
		require.False(t, got.Elided, src)
	}
}

// TestIndentIsBounded: json.Indent makes 200 MB of a 20 KB array nested
// 9 999 deep; Indent shows MaxDepth levels and [...] below them.
func TestIndentIsBounded(t *testing.T) {
	t.Parallel()
	deep := []byte(strings.Repeat("[", 9999) + strings.Repeat("]", 9999))
	p := jsonpreview.Indent(deep, true, "", "  ", jsonpreview.Limits{MaxBytes: 64 << 10, MaxDepth: 3})
	require.Equal(t, "[\n  [\n    [\n      […]\n    ]\n  ]\n]", p.Text)
	require.True(t, p.Elided)
	require.False(t, p.Cut)
	p = jsonpreview.Indent([]byte(`{"a": {"b": {"c": 1}}, "z": [1]}`), true, "", " ", jsonpreview.Limits{MaxBytes: 100, MaxDepth: 2})
	require.Equal(t, "{\n \"a\": {\n  \"b\": {…}\n },\n \"z\": [\n  1\n ]\n}", p.Text)

	// Past MaxBytes the text stops, on a whole character.
	var big bytes.Buffer
	big.WriteString(`[`)
	for i := range 100000 {
		if i > 0 {
			big.WriteString(", ")
		}
		big.WriteString(`{"name": "çava ✓", "n": 12345}`)
	}
	big.WriteString(`]`)
	for _, n := range []int{1000, 1001, 1002, 1003} {
		p = jsonpreview.Indent(big.Bytes(), true, "  ", "  ", jsonpreview.Limits{MaxBytes: n, MaxDepth: 20})
		require.True(t, p.Cut)
		require.LessOrEqual(t, len(p.Text), n)
		require.Greater(t, len(p.Text), n-10)
		require.True(t, utf8.ValidString(p.Text))
	}

	// The start of a document: shown, and said to be cut.
	p = jsonpreview.Indent(big.Bytes()[:500], false, "", "  ", jsonpreview.Limits{MaxBytes: 1 << 20, MaxDepth: 20})
	require.True(t, p.Cut)
	require.True(t, strings.HasPrefix(p.Text, "[\n  {\n    \"name\": \"çava ✓\",\n    \"n\": 12345\n  },"))
	// Cut inside a string, and inside an elided array.
	p = jsonpreview.Indent([]byte(`{"a": "unfinished`), false, "", "  ", wide)
	require.True(t, p.Cut)
	require.Equal(t, "{\n  \"a\": \"unfinished", p.Text)
	p = jsonpreview.Indent(deep[:3000], false, "", " ", jsonpreview.Limits{MaxBytes: 1 << 20, MaxDepth: 2})
	require.True(t, p.Cut)
	require.True(t, p.Elided)
	require.Equal(t, "[\n [\n  […]", p.Text)
}
