package freetext

import (
	"fmt"
	"unicode/utf8"
)

// Caps on the free text a caller gives. A cap keeps a value small enough
// to store on every row an action touches (a workflow's cancel reason is
// written on each of its jobs), to log, and to show on one line of the CLI
// or the dashboard; the names and keys a job carries have their own caps
// (the root package's MaxKindBytes, MaxQueueBytes and MaxKeyBytes).
const (
	// MaxReasonBytes is the longest reason an operator gives for an
	// action (a cancel, a pause, a kill switch): a sentence or two and a
	// link, not a report.
	MaxReasonBytes = 1 << 10
	// MaxNameBytes is the longest name or label a caller gives that no
	// other rule caps: who acted, a schedule's name, a node id, a switch
	// change's source, a trigger's request id, a filter on a node. It is
	// MaxQueueBytes, the cap on queue names.
	MaxNameBytes = 128
)

// Check says what is wrong with s as the text of field, or nil: bytes
// that are not UTF-8 and NUL bytes (PostgreSQL refuses both in a text
// column with its own error, SQLite stores them, C tools and terminals
// cut a value at a NUL), and more than limit bytes. The error names the
// field, quotes the value cut short, and says what to do.
func Check(field, s string, limit int) error {
	bad := UnstorableAt(s) // the one rule Clean applies too
	switch {
	case bad >= 0 && s[bad] != 0:
		return fmt.Errorf("%s %s is not valid UTF-8: use UTF-8 text", field, QuoteShort(s))
	case bad >= 0:
		return fmt.Errorf("%s %s contains a NUL byte: remove it", field, QuoteShort(s))
	case len(s) > limit:
		return fmt.Errorf("%s %s is %d bytes, over the %d-byte limit: use a shorter one", field, QuoteShort(s), len(s), limit)
	}
	return nil
}

// Field is one free-text field of a call, for CheckAll.
type Field struct {
	// Name names the field in the error, as the caller knows it
	// ("reason", "kind filter").
	Name  string
	Value string
	// Max is the field's cap, in bytes.
	Max int
}

// CheckAll checks fields in order and returns the first one's error.
func CheckAll(fields ...Field) error {
	for _, f := range fields {
		if err := Check(f.Name, f.Value, f.Max); err != nil {
			return err
		}
	}
	return nil
}

// QuoteShort quotes s for an error message, cut to a readable length: a
// 10,000-character name must not make a 10,000-character error.
func QuoteShort(s string) string {
	const maxQuoted = 40
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}
