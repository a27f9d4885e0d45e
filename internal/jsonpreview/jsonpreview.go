// Package jsonpreview indents JSON for people to read, within bounds: a
// page or a command that shows a payload must not turn 20 KB nested 9 999
// deep into 200 MB of indentation (json.Indent writes two bytes per level
// on every line), nor hold a payload of megabytes to show its first
// screens. Indent reads only the start of a document, writes at most a
// given number of bytes, and shows arrays and objects past a given depth
// as […] and {…}.
package jsonpreview

import (
	"bytes"
	"unicode/utf8"
)

// Limits bound a preview.
type Limits struct {
	// MaxBytes is the most bytes of indented text written; the text is cut
	// at the end of a line before it.
	MaxBytes int
	// MaxDepth is the deepest level of arrays and objects shown; one
	// nested deeper is written […] or {…}, its content skipped.
	MaxDepth int
}

// Preview is indented JSON text and what was left out of it.
type Preview struct {
	Text string
	// Cut is true when the text ends before the document does: MaxBytes
	// was reached, or src held only the document's start.
	Cut bool
	// Elided is true when some array or object was nested deeper than
	// MaxDepth and written […] or {…}.
	Elided bool
}

// Indent indents src, JSON text or the start of it (complete says which),
// with prefix at the start of every line but the first and indent per
// level, as json.Indent does, within l. Text that is not JSON is shown as it is, as
// far as it is read.
func Indent(src []byte, complete bool, prefix, indent string, l Limits) Preview {
	p := printer{src: src, prefix: prefix, indent: indent, l: l}
	p.run()
	text := p.out.Bytes()
	cut := p.cut || (!complete && p.i >= len(src))
	if len(text) > l.MaxBytes {
		text = text[:validPrefix(text, l.MaxBytes)]
		cut = true
	}
	return Preview{Text: string(text), Cut: cut, Elided: p.elided}
}

type printer struct {
	src            []byte
	i              int
	prefix, indent string
	l              Limits
	out            bytes.Buffer
	depth          int
	// afterOpen is true right after { or [: an empty container stays {}.
	afterOpen bool
	cut       bool // the source ended inside a token or an elided value
	elided    bool
}

func (p *printer) newline() {
	p.out.WriteByte('\n')
	p.out.WriteString(p.prefix)
	for range p.depth {
		p.out.WriteString(p.indent)
	}
}

func (p *printer) run() {
	for p.i < len(p.src) && p.out.Len() <= p.l.MaxBytes {
		c := p.src[p.i]
		if blank(c) {
			p.i++
			continue
		}
		opened := p.afterOpen
		p.afterOpen = false
		if opened && c != '}' && c != ']' {
			p.newline()
		}
		switch c {
		case '{', '[':
			if p.depth >= p.l.MaxDepth {
				p.elide(c)
				continue
			}
			p.out.WriteByte(c)
			p.depth++
			p.afterOpen = true
			p.i++
		case '}', ']':
			p.depth = max(p.depth-1, 0)
			if !opened {
				p.newline()
			}
			p.out.WriteByte(c)
			p.i++
		case ',':
			p.out.WriteByte(',')
			p.newline()
			p.i++
		case ':':
			p.out.WriteString(": ")
			p.i++
		case '"':
			end, ok := stringEnd(p.src, p.i)
			p.out.Write(p.src[p.i:validPrefix(p.src, end)])
			p.i = end
			if !ok {
				p.cut = true
			}
		default: // a number, true, false, null, or what is not JSON
			start := p.i
			for p.i < len(p.src) && !delimiter(p.src[p.i]) {
				p.i++
			}
			p.out.Write(p.src[start:p.i])
		}
	}
	if p.i < len(p.src) {
		p.cut = true
	}
}

func blank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func delimiter(c byte) bool {
	switch c {
	case ',', ':', '[', ']', '{', '}', '"':
		return true
	}
	return blank(c)
}

// elide writes […] or {…} for the container opening at p.i and skips to
// its end.
func (p *printer) elide(open byte) {
	p.elided = true
	if open == '{' {
		p.out.WriteString("{…}")
	} else {
		p.out.WriteString("[…]")
	}
	level := 0
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case '"':
			end, ok := stringEnd(p.src, p.i)
			if !ok {
				p.i, p.cut = len(p.src), true
				return
			}
			p.i = end
			continue
		case '{', '[':
			level++
		case '}', ']':
			level--
			if level == 0 {
				p.i++
				return
			}
		}
		p.i++
	}
	p.cut = true
}

// stringEnd returns the index just past the string starting at src[i],
// and false when src ends inside it.
func stringEnd(src []byte, i int) (int, bool) {
	for k := i + 1; k < len(src); k++ {
		switch src[k] {
		case '\\':
			k++
		case '"':
			return k + 1, true
		}
	}
	return len(src), false
}

// validPrefix returns how much of b, at most n bytes, ends on a whole
// UTF-8 character.
func validPrefix(b []byte, n int) int {
	n = min(n, len(b))
	for k := n; k > 0 && n-k < utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k-1]) {
			if utf8.FullRune(b[k-1 : n]) {
				return n
			}
			return k - 1
		}
	}
	return n
}
