package readme

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Link is one inline link or image of a Markdown document, outside code.
type Link struct {
	// Line is the line the link's target is on, from 1.
	Line int
	// Target is what the link points at, as written: a URL, a path
	// relative to the document, a #fragment, or a path and a fragment.
	Target string
}

var (
	// inlineCode is a code span: a run of backticks, what follows up to
	// the same run again.
	inlineCode = regexp.MustCompile("(`+)[^`]+?(`+)")
	// inlineLink is [text](target) or [text](target "title"), text holding
	// at most one level of brackets; an image is the same after its "!".
	inlineLink = regexp.MustCompile(`\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// atxHeading is a heading line: # to ######, then its text.
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
)

// prose is doc with every fenced code block's lines and every code span
// blanked, lines kept where they were, so that what looks like a link or a
// heading inside code is neither.
func prose(doc string) string {
	lines := strings.Split(doc, "\n")
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), fence) {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	text := strings.Join(lines, "\n")
	return inlineCode.ReplaceAllStringFunc(text, func(span string) string {
		m := inlineCode.FindStringSubmatch(span)
		if len(m[1]) != len(m[2]) {
			return span // not closed by the same run: leave it
		}
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, span)
	})
}

// Links returns the inline links and images of a Markdown document, in
// order, leaving out what is inside code blocks and code spans.
func Links(doc string) []Link {
	text := prose(doc)
	var out []Link
	for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, Link{
			Line:   1 + strings.Count(text[:m[2]], "\n"),
			Target: text[m[2]:m[3]],
		})
	}
	return out
}

// Anchors returns the fragments a document's headings answer to, as GitHub
// makes them: the heading's text lowercased, its punctuation dropped,
// spaces turned into hyphens, and "-1", "-2"… after a fragment already
// taken by an earlier heading.
func Anchors(doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	lines := strings.Split(doc, "\n")
	inFence := false
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), fence) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		m := atxHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := Slug(m[2])
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// Slug is the fragment GitHub gives a heading of this text: lowercased,
// every character but letters, digits, spaces, hyphens and underscores
// dropped, each space a hyphen. A link's text stands for the link.
func Slug(heading string) string {
	heading = inlineLink.ReplaceAllStringFunc(heading, func(l string) string {
		return l[1:strings.Index(l, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Documents returns the Markdown documents of the repository at root whose
// examples run and whose links are checked: README.md and every .md under
// docs/, as slash-separated paths from root, in lexical order.
func Documents(root string) ([]string, error) {
	docs := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		docs = append(docs, filepath.ToSlash(rel))
		return nil
	})
	return docs, err
}
