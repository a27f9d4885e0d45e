package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// kindMaxLen is the fila_jobs_kind_valid constraint's limit.
const kindMaxLen = 200

// checkKind refuses a kind name an operator could not tell apart from
// another one in a listing, or type back: blank, holding a tab, a newline or
// another control character, with spaces around it, or too long for the
// table.
func checkKind(kind string) error {
	switch {
	case kind == "":
		return fmt.Errorf("kind is empty")
	case strings.TrimSpace(kind) == "":
		return fmt.Errorf("kind %q is blank", kind)
	case !utf8.ValidString(kind):
		return fmt.Errorf("kind %q is not valid UTF-8", kind)
	case strings.TrimSpace(kind) != kind:
		return fmt.Errorf("kind %q starts or ends with a space", kind)
	case len(kind) > kindMaxLen:
		return fmt.Errorf("kind %q… is %d bytes; at most %d", kind[:40], len(kind), kindMaxLen)
	}
	for _, r := range kind {
		if unicode.IsControl(r) || (unicode.IsSpace(r) && r != ' ') {
			return fmt.Errorf("kind %q holds a tab, newline or other control character", kind)
		}
	}
	return nil
}
