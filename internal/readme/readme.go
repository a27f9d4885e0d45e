// Package readme reads the examples of a Markdown document — every fenced
// code block — with what its marker says to do with it, so that a test can
// run each one and a document cannot show an example that does not work.
//
// Every block carries a marker: an HTML comment, invisible once rendered,
// on the line just before its opening fence. It says the block runs, with
// options separated by semicolons, or why it does not:
//
//	<!-- example: run -->
//	<!-- example: run; given dead charge jobs; exits 1 -->
//	<!-- example: run; until "welcome mail" -->
//	<!-- example: run; in the repository -->
//	<!-- example: run; excerpt of docs/fila.example.yaml -->
//	<!-- example: not run: the benchmark takes minutes -->
//
// A block without a marker, an option this package does not know, or a
// "not run" without its reason is an error: whoever adds an example
// decides how it is checked.
package readme

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Example is one fenced code block and its marker.
type Example struct {
	// Line is the line of the opening fence, from 1.
	Line int
	// Lang is the first word of the fence's info string ("sh", "go"), ""
	// for none.
	Lang string
	// Code is the block's text, each line ending with a newline.
	Code string

	// Run is true for a block to run; NotRun says why one is not.
	Run    bool
	NotRun string
	// Given names the state the runner sets up before the block runs;
	// "" for its default.
	Given string
	// Exits is the exit status the block's last command must end with.
	Exits int
	// Until is text the block's program prints once it has done what it
	// shows; the runner then stops it as an operator would (SIGINT) and
	// expects it to exit cleanly.
	Until string
	// InRepository runs the block from the repository's root rather than
	// an empty directory.
	InRepository bool
	// ExcerptOf is a file of the repository whose lines the block's
	// lines are, in the same order.
	ExcerptOf string
}

const (
	markerStart = "<!-- example:"
	markerEnd   = "-->"
	fence       = "```"
)

// Parse returns the examples of a Markdown document, or every mistake of
// its markers, each naming its line.
func Parse(doc string) ([]Example, error) {
	lines := strings.Split(doc, "\n")
	var (
		out      []Example
		errs     []error
		marker   *Example // the marker of the line before, if any
		markerAt int
	)
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, args...)))
	}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		n := i + 1
		switch {
		case strings.HasPrefix(line, markerStart):
			if marker != nil {
				fail(markerAt, "an example marker not followed by a code block")
			}
			ex, err := parseMarker(line)
			if err != nil {
				fail(n, "%v", err)
				ex = Example{NotRun: "(invalid marker)"}
			}
			marker, markerAt = &ex, n
		case strings.HasPrefix(line, fence):
			ex := Example{}
			if marker != nil && markerAt == n-1 {
				ex = *marker
			} else {
				fail(n, "a code block without an example marker on the line before it: add <!-- example: run --> or <!-- example: not run: REASON -->")
			}
			marker = nil
			ex.Line = n
			if f := strings.Fields(strings.TrimPrefix(line, fence)); len(f) > 0 {
				ex.Lang = f[0]
			}
			var code strings.Builder
			closed := false
			for i++; i < len(lines); i++ {
				if strings.TrimSpace(lines[i]) == fence {
					closed = true
					break
				}
				code.WriteString(lines[i] + "\n")
			}
			if !closed {
				fail(n, "a code block that is never closed")
			}
			ex.Code = code.String()
			out = append(out, ex)
		default:
			if marker != nil && markerAt == n-1 {
				fail(markerAt, "an example marker not followed by a code block on the next line")
				marker = nil
			}
		}
	}
	if marker != nil {
		fail(markerAt, "an example marker not followed by a code block")
	}
	return out, errors.Join(errs...)
}

// parseMarker reads one marker line.
func parseMarker(line string) (Example, error) {
	if !strings.HasSuffix(line, markerEnd) {
		return Example{}, errors.New("an example marker must end on its line with -->")
	}
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, markerStart), markerEnd))
	if reason, ok := strings.CutPrefix(body, "not run:"); ok {
		reason = strings.TrimSpace(reason)
		if reason == "" {
			return Example{}, errors.New(`"not run" needs its reason: <!-- example: not run: REASON -->`)
		}
		return Example{NotRun: reason}, nil
	}
	parts := splitOptions(body)
	if strings.TrimSpace(parts[0]) != "run" {
		return Example{}, fmt.Errorf("%q: an example marker says run or not run: REASON", body)
	}
	ex := Example{Run: true}
	for _, p := range parts[1:] {
		p = strings.TrimSpace(p)
		switch {
		case strings.HasPrefix(p, "given "):
			ex.Given = strings.TrimSpace(strings.TrimPrefix(p, "given "))
		case strings.HasPrefix(p, "exits "):
			n, err := strconv.Atoi(strings.TrimPrefix(p, "exits "))
			if err != nil || n < 0 || n > 255 {
				return Example{}, fmt.Errorf("%q: an exit status is 0 to 255", p)
			}
			ex.Exits = n
		case strings.HasPrefix(p, "until "):
			s, err := strconv.Unquote(strings.TrimPrefix(p, "until "))
			if err != nil || s == "" {
				return Example{}, fmt.Errorf(`%q: until takes the text to wait for, quoted: until "done"`, p)
			}
			ex.Until = s
		case p == "in the repository":
			ex.InRepository = true
		case strings.HasPrefix(p, "excerpt of "):
			ex.ExcerptOf = strings.TrimSpace(strings.TrimPrefix(p, "excerpt of "))
		default:
			return Example{}, fmt.Errorf("%q: unknown option (given …, exits N, until \"…\", in the repository, excerpt of FILE)", p)
		}
	}
	return ex, nil
}

// splitOptions splits a marker's body at the semicolons outside quotes.
func splitOptions(body string) []string {
	var (
		parts  []string
		quoted bool
		start  int
	)
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\\':
			if quoted {
				i++ // an escaped character, a quote among them
			}
		case '"':
			quoted = !quoted
		case ';':
			if !quoted {
				parts = append(parts, body[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, body[start:])
}
