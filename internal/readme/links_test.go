package readme_test

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/readme"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// scheme starts an absolute URL (https:, mailto:), which no test follows.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// brokenLinks checks every link of the documents (paths from root): a
// relative link must name a file or folder of the repository, and a
// fragment a heading of the Markdown document it points into. It returns
// one line per broken link, naming the document and the line.
func brokenLinks(t *testing.T, root string, docs []string) []string {
	t.Helper()
	anchors := map[string]map[string]bool{} // by path from root
	read := func(doc string) string {
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		require.NoError(t, err)
		return string(text)
	}
	anchorsOf := func(doc string) map[string]bool {
		if a, ok := anchors[doc]; ok {
			return a
		}
		anchors[doc] = readme.Anchors(read(doc))
		return anchors[doc]
	}
	var broken []string
	for _, doc := range docs {
		for _, l := range readme.Links(read(doc)) {
			fail := func(format string, args ...any) {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s", doc, l.Line, l.Target, fmt.Sprintf(format, args...)))
			}
			if scheme.MatchString(l.Target) {
				continue
			}
			rawPath, fragment, _ := strings.Cut(l.Target, "#")
			p, err := url.PathUnescape(rawPath)
			if err != nil {
				fail("not a path: %v", err)
				continue
			}
			target := doc
			if p != "" {
				if strings.HasPrefix(p, "/") {
					fail("a path from the site's root: write it relative to %s", doc)
					continue
				}
				target = path.Join(path.Dir(doc), p)
				if target == ".." || strings.HasPrefix(target, "../") {
					fail("outside the repository")
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					fail("no such file in the repository (paths are relative to %s)", path.Dir(doc))
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				fail("a fragment of a file that is not Markdown")
				continue
			}
			if !anchorsOf(target)[fragment] {
				fail("no heading of %s makes the anchor #%s", target, fragment)
			}
		}
	}
	return broken
}

// Every link between the repository's documents leads somewhere: moving a
// section from one document to another breaks the links to it, and this
// names each one.
func TestLinksBetweenDocuments(t *testing.T) {
	t.Parallel()
	docs, err := readme.Documents(repoRoot)
	require.NoError(t, err)
	require.Contains(t, docs, "docs/configuration.md")
	require.Empty(t, brokenLinks(t, repoRoot, docs), "broken links")
}

func TestBrokenLinksAreFound(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), []byte(text), 0o644))
	}
	write("main.go", "package main\n")
	write("README.md", "# Fila\n\n## Why: a queue, in PostgreSQL\n\n"+
		"[ok](docs/guide.md#the-guides-part) [ok](#why-a-queue-in-postgresql) [ok](main.go) [ok](https://example.com/x.md#y)\n"+
		"[missing\nfile](docs/gone.md)\n"+
		"[missing heading](docs/guide.md#nowhere)\n"+
		"`[in code](nowhere.md)`\n\n"+
		"<!-- example: not run: not a link -->\n```go\nx := a[i](j)\n```\n")
	write("docs/guide.md", "# The guide's part\n\n[ok](../README.md#fila) [up too far](../../x.md) [wrong base](docs/guide.md) [ok](guide.md#the-guides-part) [fragment](../main.go#L1)\n")
	docs, err := readme.Documents(root)
	require.NoError(t, err)
	require.Equal(t, []string{"README.md", "docs/guide.md"}, docs)
	require.Equal(t, []string{
		"README.md:7: docs/gone.md: no such file in the repository (paths are relative to .)",
		"README.md:8: docs/guide.md#nowhere: no heading of docs/guide.md makes the anchor #nowhere",
		"docs/guide.md:3: ../../x.md: outside the repository",
		"docs/guide.md:3: docs/guide.md: no such file in the repository (paths are relative to docs)",
		"docs/guide.md:3: ../main.go#L1: a fragment of a file that is not Markdown",
	}, brokenLinks(t, root, docs))
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Choosing notify, WAL or poll":                "choosing-notify-wal-or-poll",
		"Writing to fila_jobs by hand":                "writing-to-fila_jobs-by-hand",
		"Job flows: workflows, sequences and batches": "job-flows-workflows-sequences-and-batches",
		"River → Fila":                                "river--fila",
		"Testing your code: filatest":                 "testing-your-code-filatest",
		"The `fila` command":                          "the-fila-command",
		"See [the guide](docs/x.md)":                  "see-the-guide",
	} {
		require.Equal(t, want, readme.Slug(heading), heading)
	}
	a := readme.Anchors("# A\n## A\n```\n# not a heading\n```\n## A\n")
	require.Equal(t, map[string]bool{"a": true, "a-1": true, "a-2": true}, a)
}
