package twicetype

import (
	"fmt"
	"strings"
	"time"
)

// LimitScope says what a limit override changes: a kind's limits or a
// queue's concurrency.
type LimitScope string

// The scopes of a limit override.
const (
	// LimitScopeKind overrides a kind's KindLimit, across every node.
	LimitScopeKind LimitScope = "kind"
	// LimitScopeQueue overrides how many jobs of a queue each worker
	// runs at once (its Config.Queues concurrency).
	LimitScopeQueue LimitScope = "queue"
)

// LimitSetting is the value a limit override sets: Limit for a kind's
// override, Concurrency for a queue's; the other is zero.
type LimitSetting struct {
	Limit       KindLimit
	Concurrency int
}

// Text puts the setting in words as scope reads it: a kind's limits
// ("global 3, rate 10/1s", or "no limit") or a queue's concurrency
// ("concurrency 5").
func (s LimitSetting) Text(scope LimitScope) string {
	if scope == LimitScopeQueue {
		return fmt.Sprintf("concurrency %d", s.Concurrency)
	}
	if p := s.Limit.Phrases(); len(p) > 0 {
		return strings.Join(p, ", ")
	}
	return "no limit"
}

// LimitOverride is an operator's runtime override of a kind's limits or a
// queue's concurrency: workers apply it instead of the compiled value
// (KindOpts' limits, Config.Queues' concurrency) until it is reset.
type LimitOverride struct {
	Scope LimitScope
	// Name is the kind (lower-cased) or the queue.
	Name string
	LimitSetting
	By     string // who set it
	Reason string // why, as the operator typed it
	At     time.Time
}

// LimitChange is one row of the limit history: an override set or reset,
// who did it and why, and the override before and after. Rows are never
// updated, so the history still says who changed a limit before the last
// change.
type LimitChange struct {
	// ID orders the history: a later change has a larger id.
	ID    int64
	Scope LimitScope
	Name  string
	// Previous is the override before the change; nil when none was set
	// (the compiled value applied).
	Previous *LimitSetting
	// New is the override the change set; nil for a reset (back to the
	// compiled value).
	New    *LimitSetting
	By     string
	Reason string
	At     time.Time
}
