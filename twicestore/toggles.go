package twicestore

import (
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// ToggleSetParams carry the kill switch to store. A zero Toggle.At is the
// current time; Toggle.ExpiresAt, when set, is when the switch stops
// counting. The store keeps an expiry that is already past (refusing it is
// the caller's business): the switch is then absent from ToggleList at
// once, and the history records the set.
type ToggleSetParams struct {
	Toggle twicetype.Toggle
	// Source is recorded in the switch history; empty records
	// twicetype.ToggleSourceStore.
	Source string
}

// ToggleDeleteParams name the kind whose kill switch is removed, and who
// removes it and why, for the switch history.
type ToggleDeleteParams struct {
	Kind   string
	By     string
	Reason string
	// Source is recorded in the switch history; empty records
	// twicetype.ToggleSourceStore.
	Source string
	// At is when the switch was removed; zero is the current time.
	At time.Time
}

// ToggleListParams give the time switches are judged expired at.
type ToggleListParams struct {
	// Now leaves out the switches whose ExpiresAt is at or before it; zero
	// is the current time.
	Now time.Time
}

// ToggleListResult holds the stored kill switches, ordered by kind.
type ToggleListResult struct {
	Toggles []twicetype.Toggle
}

// ToggleHistoryParams select and page the switch history.
type ToggleHistoryParams struct {
	// Kind is the kind whose history is listed, compared case-insensitively;
	// empty lists every kind's.
	Kind string
	// BeforeID continues a listing: only changes with a smaller id are
	// listed.
	BeforeID int64
	// Limit bounds the changes listed; zero lists them all.
	Limit int
}

// ToggleHistoryResult holds the changes, newest first.
type ToggleHistoryResult struct {
	Changes []twicetype.ToggleChange
}
