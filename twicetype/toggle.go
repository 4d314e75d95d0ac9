package twicetype

import "time"

// ToggleState is a kind's stored kill switch as one word, for the switch
// history: on, off, or none when no switch is stored (or it expired).
type ToggleState string

// The states a stored kill switch can be in.
const (
	// ToggleOn is a stored switch that turns the kind on.
	ToggleOn ToggleState = "on"
	// ToggleOff is a stored switch that turns the kind off.
	ToggleOff ToggleState = "off"
	// ToggleNone is no stored switch: the kind follows its other sources
	// and its registration default. An expired switch counts as none.
	ToggleNone ToggleState = "none"
)

// StateOf returns the state a stored switch stands for at now: none when it
// has expired (its ExpiresAt is at or before now).
func (t Toggle) StateOf(now time.Time) ToggleState {
	switch {
	case t.Expired(now):
		return ToggleNone
	case t.Enabled:
		return ToggleOn
	default:
		return ToggleOff
	}
}

// Expired reports whether the switch no longer counts at now: it has an
// expiry and that expiry is at or before now.
func (t Toggle) Expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !t.ExpiresAt.After(now)
}

// ToggleSourceStore is the source of a switch change made through the
// store (the CLI, the dashboard or the Client's admin API), the default
// when a change names none.
const ToggleSourceStore = "store"

// ToggleChange is one row of the switch history: a kill switch set or
// deleted, who did it and why, and what the kind's stored switch was
// before and after. Rows are never updated, so the history still says who
// flipped a switch before the last flip.
type ToggleChange struct {
	// ID orders the history: a later change has a larger id.
	ID       int64
	Kind     string // lower-cased, as the switch is stored
	By       string // who (user@host for the CLI)
	Reason   string // why, as the operator typed it
	Previous ToggleState
	New      ToggleState
	// Source says where the change came from: ToggleSourceStore for the
	// CLI and the dashboard, or what the caller of the admin API named.
	Source string
	// ExpiresAt is the expiry the change set; zero for none (and for a
	// delete).
	ExpiresAt time.Time
	At        time.Time // when the change was made
}
