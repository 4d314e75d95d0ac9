// Package toggles decides whether a job kind may run: the per-kind kill
// switch. It holds the rule that combines the two sources (a TOML config file
// and the store's toggles set from the CLI), spots toggle keys that name no
// registered kind, parses the file and watches it for changes. It does not
// hold jobs or read the store itself; the runtime feeds it both sources.
package toggles

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twicejobs/twice/twicetype"
)

// Source names where a Decision came from.
type Source string

// The sources a Decision can be decided by.
const (
	// SourceFile is the toggles config file.
	SourceFile Source = "file"
	// SourceStore is a toggle set in the store (from the CLI or dashboard).
	SourceStore Source = "store"
	// SourceDefault is the kind's registration default: no source had a key.
	SourceDefault Source = "default"
)

// Decision is whether one kind may run, and why.
type Decision struct {
	// Kind is the kind as the caller spelled it (its registered name).
	Kind string
	// Enabled reports whether jobs of the kind may run.
	Enabled bool
	// DecidedBy is the source that settled it. When the file and the store
	// agree, it is the store, whose toggle says who, why and when.
	DecidedBy Source
	// FailClosed reports whether the kind was registered fail-closed: off
	// unless a source explicitly turns it on.
	FailClosed bool

	// FileSet reports whether the file has a key for the kind; FileEnabled
	// is its value.
	FileSet     bool
	FileEnabled bool
	// StoreSet reports whether the store has a toggle for the kind; Store is
	// that toggle (who set it, why and when).
	StoreSet bool
	Store    twicetype.Toggle
}

// String describes the decision for a log line or the CLI, e.g.
// `email.welcome.v1 off (store by ops@host at 2026-01-02T15:04:05Z: "smtp down")`.
func (d Decision) String() string {
	state := "off"
	if d.Enabled {
		state = "on"
	}
	var why string
	switch d.DecidedBy {
	case SourceStore:
		why = "store"
		if d.Store.By != "" {
			why += " by " + d.Store.By
		}
		if !d.Store.At.IsZero() {
			why += " at " + d.Store.At.UTC().Format("2006-01-02T15:04:05Z")
		}
		if d.Store.Reason != "" {
			why += fmt.Sprintf(": %q", d.Store.Reason)
		}
	case SourceFile:
		why = "file"
	default:
		why = "default"
		if d.FailClosed {
			why = "default: fail-closed"
		}
	}
	return fmt.Sprintf("%s %s (%s)", d.Kind, state, why)
}

// Decide applies the kill-switch rule to one registered kind: any source
// saying off wins; otherwise an explicit on from any source; otherwise the
// registration default, which is on unless the kind is failClosed.
//
// Both maps are keyed by strings.ToLower of the kind (ParseFile and NewSet
// build them so); kind itself may be spelled in any case. Either map may be
// nil. Decide is pure: same inputs, same Decision.
func Decide(kind string, failClosed bool, file map[string]bool, store map[string]twicetype.Toggle) Decision {
	key := strings.ToLower(kind)
	d := Decision{Kind: kind, FailClosed: failClosed}
	d.FileEnabled, d.FileSet = file[key]
	d.Store, d.StoreSet = store[key]
	storeOff := d.StoreSet && !d.Store.Enabled
	fileOff := d.FileSet && !d.FileEnabled
	switch {
	// The store is checked first in both branches so that, when the sources
	// agree, DecidedBy points at the one that says who and why.
	case storeOff:
		d.DecidedBy = SourceStore
	case fileOff:
		d.DecidedBy = SourceFile
	case d.StoreSet: // on
		d.Enabled, d.DecidedBy = true, SourceStore
	case d.FileSet: // on
		d.Enabled, d.DecidedBy = true, SourceFile
	default:
		d.Enabled, d.DecidedBy = !failClosed, SourceDefault
	}
	return d
}

// Set is one snapshot of both sources, normalised for Decide. Its zero
// value has no toggles: every kind gets its registration default. A Set is
// never modified after NewSet, so one may be shared between goroutines and
// swapped whole (e.g. behind an atomic.Pointer) when either source changes.
type Set struct {
	file  map[string]bool
	store map[string]twicetype.Toggle
}

// NewSet builds a Set from the file's toggles (as ParseFile returns them;
// keys are lower-cased again here, so any map will do) and the store's.
// Should the store hold two toggles for one kind differing only in case, off
// wins, as in the rule, then the later one.
func NewSet(file map[string]bool, store []twicetype.Toggle) Set {
	s := Set{
		file:  make(map[string]bool, len(file)),
		store: make(map[string]twicetype.Toggle, len(store)),
	}
	for k, v := range file {
		k = strings.ToLower(k)
		if old, ok := s.file[k]; ok {
			v = old && v // off wins
		}
		s.file[k] = v
	}
	for _, t := range store {
		k := strings.ToLower(t.Kind)
		if old, ok := s.store[k]; ok {
			if !old.Enabled && t.Enabled {
				continue
			}
			if old.Enabled == t.Enabled && old.At.After(t.At) {
				continue
			}
		}
		s.store[k] = t
	}
	return s
}

// Decide applies the rule (see the package-level Decide) to kind with both
// of the set's sources.
func (s Set) Decide(kind string, failClosed bool) Decision {
	return Decide(kind, failClosed, s.file, s.store)
}

// Keys returns every toggle key in either source, lower-cased, each once,
// sorted: the input Unknown checks against the registered kinds.
func (s Set) Keys() []string {
	keys := make([]string, 0, len(s.file)+len(s.store))
	for k := range s.file {
		keys = append(keys, k)
	}
	for k := range s.store {
		if _, dup := s.file[k]; !dup {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
