package driverkit

import (
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// ToggleKey is how a kind is stored as a toggle's key: lower-cased in Go,
// the same on every driver (SQL's LOWER() would not be: MySQL's leaves a
// binary string as it is).
func ToggleKey(kind string) string { return strings.ToLower(kind) }

// ToggleSource is the source a switch history row records: the caller's,
// or ToggleSourceStore when it named none.
func ToggleSource(s string) string {
	if s == "" {
		return twicetype.ToggleSourceStore
	}
	return s
}

// ToggleRow returns the reader of one row of twice_toggles, its columns
// selected as kind, enabled, reason, set_by, set_at, expires_at; its times
// read as tm says.
func ToggleRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.Toggle, error) {
	return func(r dbrows.Scanner) (twicetype.Toggle, error) {
		var (
			tg      twicetype.Toggle
			at      T
			expires N
		)
		if err := r.Scan(&tg.Kind, &tg.Enabled, &tg.Reason, &tg.By, &at, &expires); err != nil {
			return tg, err
		}
		tg.At, tg.ExpiresAt = tm.At(at), tm.Null(expires)
		return tg, nil
	}
}

// ToggleChangeRow returns the reader of one row of twice_toggle_history,
// its columns selected as id, kind, set_by, reason, previous_state,
// new_state, source, expires_at, changed_at; its times read as tm says.
func ToggleChangeRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.ToggleChange, error) {
	return func(r dbrows.Scanner) (twicetype.ToggleChange, error) {
		var (
			c              twicetype.ToggleChange
			previous, next string
			expires        N
			at             T
		)
		if err := r.Scan(&c.ID, &c.Kind, &c.By, &c.Reason, &previous, &next, &c.Source, &expires, &at); err != nil {
			return c, err
		}
		c.Previous, c.New = twicetype.ToggleState(previous), twicetype.ToggleState(next)
		c.ExpiresAt, c.At = tm.Null(expires), tm.At(at)
		return c, nil
	}
}
