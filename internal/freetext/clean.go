package freetext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Clean returns s made storable as text by every driver, and at most limit
// bytes long (no cap when limit is zero or less). It is for text the
// system must keep whatever it holds: a handler's error, a no-op or cancel
// reason, a panic value and its stack.
//
// A NUL byte (PostgreSQL's text refuses it) and each byte that is not part
// of valid UTF-8 (PostgreSQL refuses those too) is replaced, where it
// stood, by its escape \xNN, and the text ends with a mark saying how many
// bytes were escaped, so a reader knows the escapes are not the handler's
// own. A text over limit keeps its beginning, cut on a character boundary,
// and says how much was cut: "… [cut: N bytes]". Text that needs neither is
// returned unchanged.
func Clean(s string, limit int) string {
	cleaned, escaped := escapeUnstorable(s)
	var mark string
	if escaped > 0 {
		mark = fmt.Sprintf(" [cleaned: %d bytes that were NUL or not UTF-8 are shown as \\xNN]", escaped)
	}
	if limit <= 0 || len(cleaned)+len(mark) <= limit {
		return cleaned + mark
	}
	// The mark for the largest possible cut is no shorter than the real
	// one, so keeping this much leaves room for it.
	keep := max(limit-len(mark)-len(cutMark(len(cleaned))), 0)
	for keep > 0 && !utf8.RuneStart(cleaned[keep]) {
		keep--
	}
	return cleaned[:keep] + cutMark(len(cleaned)-keep) + mark
}

func cutMark(n int) string { return fmt.Sprintf("… [cut: %d bytes]", n) }

// UnstorableAt returns the offset of the first byte of s that no driver
// can store as text (a NUL, or a byte that is not part of valid UTF-8),
// or -1 when s is storable as it is.
func UnstorableAt(s string) int {
	for i := 0; i < len(s); {
		if s[i] == 0 {
			return i
		}
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// escapeUnstorable replaces each byte UnstorableAt would find by its
// escape \xNN, and counts them.
func escapeUnstorable(s string) (string, int) {
	first := UnstorableAt(s)
	if first < 0 {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:first])
	escaped := 0
	for i := first; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if s[i] == 0 || r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
			escaped++
			i++
			continue
		}
		b.WriteString(s[i : i+size])
		i += size
	}
	return b.String(), escaped
}
