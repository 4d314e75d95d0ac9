package twicestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// LimitOverrider stores the runtime overrides of kinds' limits and queues'
// concurrency, with their history: what an operator changes at runtime
// instead of the compiled values (KindOpts' limits, Config.Queues'
// concurrency), which stay the defaults. Workers read LimitOverrideList
// with the kill switches (and, where the store can tell them, at once:
// ToggleListener is also told of every override written).
type LimitOverrider interface {
	// LimitOverrideSet stores an override, replacing the one of the same
	// scope and name, and appends the change to the limit history in the
	// same transaction. It returns the override it replaced, if any.
	LimitOverrideSet(ctx context.Context, p *LimitOverrideSetParams) (*LimitOverrideSetResult, error)
	// LimitOverrideClear removes an override and appends the change to
	// the history in the same transaction; with no override stored it
	// changes nothing, records nothing, and returns a nil Previous.
	LimitOverrideClear(ctx context.Context, p *LimitOverrideClearParams) (*LimitOverrideClearResult, error)
	// LimitOverrideList lists the stored overrides by scope, then name.
	LimitOverrideList(ctx context.Context, p *LimitOverrideListParams) (*LimitOverrideListResult, error)
	// LimitHistory lists the changes of overrides, newest first,
	// keyset-paginated: every one's, or one scope and name's.
	LimitHistory(ctx context.Context, p *LimitHistoryParams) (*LimitHistoryResult, error)
}

// LimitOverrideSetParams carry the override to store. A zero
// Override.At is the current time.
type LimitOverrideSetParams struct {
	Override twicetype.LimitOverride
}

// Validate refuses an override no worker could apply: an unknown scope, no
// name, a kind's limits that KindLimit.Validate refuses, a queue's
// concurrency under 1. Drivers call it first in LimitOverrideSet.
func (p *LimitOverrideSetParams) Validate() error {
	o := &p.Override
	if err := checkLimitTarget(o.Scope, o.Name); err != nil {
		return err
	}
	switch o.Scope {
	case twicetype.LimitScopeKind:
		if o.Concurrency != 0 {
			return fmt.Errorf("limit override of kind %q sets a queue's concurrency: set its Limit", o.Name)
		}
		if err := o.Limit.Validate(); err != nil {
			return fmt.Errorf("limit override of kind %q: %w", o.Name, err)
		}
	case twicetype.LimitScopeQueue:
		if !o.Limit.IsZero() {
			return fmt.Errorf("concurrency override of queue %q sets a kind's limits: set its Concurrency", o.Name)
		}
		if o.Concurrency < 1 {
			return fmt.Errorf("concurrency override of queue %q: %d is under 1 (pause the queue to run none of its jobs)", o.Name, o.Concurrency)
		}
	}
	return nil
}

func checkLimitTarget(scope twicetype.LimitScope, name string) error {
	switch {
	case scope != twicetype.LimitScopeKind && scope != twicetype.LimitScopeQueue:
		return fmt.Errorf("limit override: scope %q is neither %q nor %q", scope, twicetype.LimitScopeKind, twicetype.LimitScopeQueue)
	case name == "":
		return errors.New("limit override: no kind or queue named")
	}
	return nil
}

// LimitOverrideSetResult holds the override a set replaced.
type LimitOverrideSetResult struct {
	// Previous is the override replaced; nil when none was stored.
	Previous *twicetype.LimitOverride
}

// LimitOverrideClearParams name the override to remove, and who removes
// it and why, for the history.
type LimitOverrideClearParams struct {
	Scope  twicetype.LimitScope
	Name   string
	By     string
	Reason string
	// At is when it was removed; zero is the current time.
	At time.Time
}

// Validate refuses a clear of no scope or no name.
func (p *LimitOverrideClearParams) Validate() error { return checkLimitTarget(p.Scope, p.Name) }

// LimitOverrideClearResult holds the override a clear removed.
type LimitOverrideClearResult struct {
	// Previous is the override removed; nil when none was stored.
	Previous *twicetype.LimitOverride
}

// LimitOverrideListParams are empty; they keep the method's shape.
type LimitOverrideListParams struct{}

// LimitOverrideListResult holds the stored overrides, by scope, then by
// name's bytes.
type LimitOverrideListResult struct {
	Overrides []twicetype.LimitOverride
}

// LimitHistoryParams select and page the limit history.
type LimitHistoryParams struct {
	// Scope and Name, when Name is set, list one override's history; an
	// empty Name lists every one's.
	Scope twicetype.LimitScope
	Name  string
	// BeforeID continues a listing: only changes with a smaller id are
	// listed.
	BeforeID int64
	// Limit bounds the changes listed; zero lists them all.
	Limit int
}

// LimitHistoryResult holds the changes, newest first.
type LimitHistoryResult struct {
	Changes []twicetype.LimitChange
}

// LimitHistoryPruneParams select old limit history.
type LimitHistoryPruneParams struct {
	Before time.Time
	// Limit caps the rows deleted; zero or less deletes them all.
	Limit int
}
