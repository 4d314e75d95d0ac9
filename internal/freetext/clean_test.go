package freetext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		limit    int
		want     string
	}{
		{"plain text is kept", "provider said: no", 100, "provider said: no"},
		{"no cap", strings.Repeat("a", 50), 0, strings.Repeat("a", 50)},
		{"NUL", "body: a\x00b", 100, `body: a\x00b [cleaned: 1 bytes that were NUL or not UTF-8 are shown as \xNN]`},
		{"invalid UTF-8", "r\xffé\xc3", 100, `r\xffé\xc3 [cleaned: 2 bytes that were NUL or not UTF-8 are shown as \xNN]`},
		{"surrogate half", "x\xed\xa0\x80", 100, `x\xed\xa0\x80 [cleaned: 3 bytes that were NUL or not UTF-8 are shown as \xNN]`},
		{"cut", strings.Repeat("é", 20), 30, "ééééé… [cut: 30 bytes]"},
		{"cut and cleaned", "\x00" + strings.Repeat("a", 100), 100,
			`\x00aaaaaaaaaaaa… [cut: 88 bytes] [cleaned: 1 bytes that were NUL or not UTF-8 are shown as \xNN]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Clean(tt.in, tt.limit)
			if got != tt.want {
				t.Errorf("Clean(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
			}
			if UnstorableAt(got) >= 0 || !utf8.ValidString(got) {
				t.Errorf("Clean(%q) = %q is not storable", tt.in, got)
			}
			if tt.limit > 0 && len(got) > tt.limit {
				t.Errorf("Clean(%q, %d) is %d bytes, over the limit", tt.in, tt.limit, len(got))
			}
		})
	}
}

func TestUnstorableAt(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"": -1, "ok é ✓": -1, "a\x00": 1, "é\xff": 2, "\xc3": 0, "ab\xed\xa0\x80": 2} {
		if got := UnstorableAt(in); got != want {
			t.Errorf("UnstorableAt(%q) = %d, want %d", in, got, want)
		}
	}
}
