package freetext_test

import (
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/freetext"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value string
		limit int
		want  string // a part of the error; empty: no error
	}{
		{"plain", "customer asked", freetext.MaxReasonBytes, ""},
		{"empty", "", freetext.MaxNameBytes, ""},
		{"at the cap", strings.Repeat("é", freetext.MaxNameBytes/2), freetext.MaxNameBytes, ""},
		{"control characters other than NUL", "line 1\nline 2\ttab\x1b[0m", freetext.MaxReasonBytes, ""},
		{"NUL", "ops\x00@acme", freetext.MaxNameBytes, `reason "ops\x00@acme" contains a NUL byte: remove it`},
		{"invalid UTF-8", "caf\xe9", freetext.MaxNameBytes, `reason "caf\xe9" is not valid UTF-8: use UTF-8 text`},
		{"truncated rune", "€"[:2], freetext.MaxNameBytes, "is not valid UTF-8"},
		{"over the cap", strings.Repeat("a", freetext.MaxReasonBytes+1), freetext.MaxReasonBytes,
			`reason "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"… is 1025 bytes, over the 1024-byte limit: use a shorter one`},
	} {
		err := freetext.Check("reason", tc.value, tc.limit)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tc.name, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s: no error, want %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %q, want it to hold %q", tc.name, err, tc.want)
		}
	}
}

// TestCheckQuotesShort: a long value is quoted cut short, on a rune
// boundary, so the error stays one readable line.
func TestCheckQuotesShort(t *testing.T) {
	t.Parallel()
	err := freetext.Check("by", strings.Repeat("é", 100)+"\x00", freetext.MaxReasonBytes)
	if err == nil {
		t.Fatal("no error for a NUL byte")
	}
	if msg := err.Error(); len(msg) > 120 || !strings.Contains(msg, `…`) {
		t.Errorf("error %q: want the value cut short with …", msg)
	}
}

func TestCheckAll(t *testing.T) {
	t.Parallel()
	err := freetext.CheckAll(
		freetext.Field{Name: "by", Value: "ops", Max: freetext.MaxNameBytes},
		freetext.Field{Name: "reason", Value: "bad\x00", Max: freetext.MaxReasonBytes},
		freetext.Field{Name: "source", Value: "\xff", Max: freetext.MaxNameBytes},
	)
	if err == nil || !strings.HasPrefix(err.Error(), `reason "bad\x00"`) {
		t.Errorf("CheckAll = %v, want the first bad field, the reason", err)
	}
	if err := freetext.CheckAll(freetext.Field{Name: "by", Value: "ops", Max: freetext.MaxNameBytes}); err != nil {
		t.Errorf("CheckAll of good text = %v", err)
	}
}
