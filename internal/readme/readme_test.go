package readme_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/readme"
)

func TestParse(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\n" +
		"<!-- example: run; given dead charge jobs; exits 1 -->\n" +
		"```console\n$ fila stats --check --max-dead 0\ndead jobs: 3 > 0\n```\n\n" +
		"<!-- example: not run: a diagram -->\n" +
		"```\nA ──► B\n```\n" +
		"<!-- example: run; until \"sent; done\"; in the repository -->\n" +
		"```go\npackage main\n```\n" +
		"<!-- example: run; excerpt of docs/fila.example.yaml -->\n" +
		"```yaml\ndsn: x\n```\n"
	got, err := readme.Parse(doc)
	require.NoError(t, err)
	require.Equal(t, []readme.Example{
		{Line: 4, Lang: "console", Code: "$ fila stats --check --max-dead 0\ndead jobs: 3 > 0\n", Run: true, Given: "dead charge jobs", Exits: 1},
		{Line: 10, Code: "A ──► B\n", NotRun: "a diagram"},
		{Line: 14, Lang: "go", Code: "package main\n", Run: true, Until: "sent; done", InRepository: true},
		{Line: 18, Lang: "yaml", Code: "dsn: x\n", Run: true, ExcerptOf: "docs/fila.example.yaml"},
	}, got)
}

// Every mistake is reported, each with its line: a document cannot hold an
// example nobody decided how to check.
func TestParseRefusesWhatItCannotCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, want string }{
		{"text\n```sh\nfila stats\n```\n", "line 2: a code block without an example marker"},
		{"<!-- example: run -->\n\n```sh\nx\n```\n", "line 1: an example marker not followed by a code block on the next line"},
		{"<!-- example: not run: -->\n```sh\nx\n```\n", `line 1: "not run" needs its reason`},
		{"<!-- example: run; quickly -->\n```sh\nx\n```\n", `line 1: "quickly": unknown option`},
		{"<!-- example: run; exits one -->\n```sh\nx\n```\n", `line 1: "exits one": an exit status is 0 to 255`},
		{"<!-- example: run; until done -->\n```sh\nx\n```\n", `until takes the text to wait for, quoted`},
		{"<!-- example: skip -->\n```sh\nx\n```\n", `an example marker says run or not run: REASON`},
		{"<!-- example: run -->\n```sh\nx\n", "line 2: a code block that is never closed"},
		{"<!-- example: run -->\n", "line 1: an example marker not followed by a code block"},
	} {
		_, err := readme.Parse(c.doc)
		require.ErrorContains(t, err, c.want, "%q", c.doc)
	}
	_, err := readme.Parse("```sh\na\n```\n```go\nb\n```\n")
	require.ErrorContains(t, err, "line 1: ")
	require.ErrorContains(t, err, "line 4: ", "every mistake, not only the first")
}
