package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What the commands print from the jobs table — kinds, queues, errors,
// payloads, worker names — was written by whoever could write a row, and a
// terminal obeys the control characters in it: ESC [ 2 J clears the
// screen, a carriage return lets a line overwrite what came before it, an
// 8-bit CSI (U+009B) or a bidirectional override reorders what the
// operator reads. Text output therefore shows each such character as an
// escape (\x1b, \r, \u009b, \u202e), and JSON output as a \u escape of
// JSON, which decodes to the same string.

// termLine returns s for one line of a terminal: every C0 control
// (newline and tab included), DEL, C1 control and bidirectional formatting
// character is shown as a Go escape, and a byte that is not UTF-8 as \xNN.
// A backslash is left as it is: the text is for reading.
func termLine(s string) string { return termEscape(s, false) }

// termText is termLine for text shown on several lines: newlines and tabs
// stay (an error's stack trace keeps its shape), and everything else
// termLine escapes is escaped.
func termText(s string) string { return termEscape(s, true) }

func termEscape(s string, multiline bool) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, size, multiline) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !needsEscape(r, size, multiline) {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// needsEscape says whether a terminal could take the rune (size bytes of
// it) for anything but text.
func needsEscape(r rune, size int, multiline bool) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r == '\n' || r == '\t':
		return !multiline
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x80:
		return false
	case r <= 0x9f: // C1 controls: 8-bit CSI, OSC, NEL…
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// jsonTerminalSafe rewrites, in JSON text, the characters encoding/json
// leaves raw that a terminal would act on — DEL, C1 controls and
// bidirectional formatting characters — as \u escapes. In valid JSON they
// can only appear inside strings, where the escape means the same
// character. (encoding/json already escapes C0 controls, U+2028 and
// U+2029.)
func jsonTerminalSafe(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if jsonEscapes(r, size) {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if jsonEscapes(r, size) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}

func jsonEscapes(r rune, size int) bool {
	if r == utf8.RuneError && size == 1 {
		return false // encoding/json never writes invalid UTF-8
	}
	return r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r)
}

// terminalJSON writes JSON text to w as jsonTerminalSafe does, a chunk at a
// time: a rune split between two writes waits for the rest of its bytes.
type terminalJSON struct {
	w    io.Writer
	tail []byte // the start of a rune cut off at the end of the last write
}

func (t *terminalJSON) Write(p []byte) (int, error) {
	b := p
	if len(t.tail) > 0 {
		b = append(t.tail, p...)
		t.tail = nil
	}
	// Hold back an incomplete rune at the end.
	cut := len(b)
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-k:]) {
				cut = len(b) - k
			}
			break
		}
	}
	if cut < len(b) {
		t.tail = bytes.Clone(b[cut:])
	}
	if _, err := t.w.Write(jsonTerminalSafe(b[:cut])); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back of a rune that never came whole.
func (t *terminalJSON) Flush() error {
	if len(t.tail) == 0 {
		return nil
	}
	_, err := t.w.Write(t.tail)
	t.tail = nil
	return err
}
