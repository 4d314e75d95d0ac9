// Package ops holds what the operator tools — the twice CLI and the
// twiceweb dashboard — show alike: each known kind's effective kill switch
// with the source that decided it, the toggle keys that name no kind, and
// job args with their sensitive fields redacted. It only reads.
package ops

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// NodeAliveWindow is how recent a node's heartbeat must be for the kinds it
// handles to count as known: three of the runtime's 10s heartbeats.
const NodeAliveWindow = 30 * time.Second

// Kinds is what a registry tells about the kinds it registers; a
// *twice.Registry is one.
type Kinds interface {
	Kinds() []string
	FailClosed(kind string) bool
}

// Catalog is what an operator tool knows about kinds: those its registry
// registers, which say whether they are fail-closed, and those live workers
// handle.
type Catalog struct {
	reg        Kinds
	registered map[string]bool
	// Live holds the kinds a live worker handles.
	Live map[string]bool
	// Kinds lists both, sorted, each once.
	Kinds []string
}

// LoadCatalog reads the live nodes from store and combines their kinds with
// reg's; reg may be nil.
func LoadCatalog(ctx context.Context, store twicestore.Executor, reg Kinds) (*Catalog, error) {
	nodes, err := store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: time.Now().Add(-NodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	return NewCatalog(reg, nodes), nil
}

// NewCatalog combines reg's kinds (reg may be nil) with those the nodes
// handle.
func NewCatalog(reg Kinds, nodes []*twicetype.Node) *Catalog {
	c := &Catalog{reg: reg, registered: map[string]bool{}, Live: map[string]bool{}}
	if reg != nil {
		for _, k := range reg.Kinds() {
			c.registered[k] = true
			c.Kinds = append(c.Kinds, k)
		}
	}
	for _, n := range nodes {
		for _, k := range n.Kinds {
			c.Live[k] = true
			if !slices.Contains(c.Kinds, k) {
				c.Kinds = append(c.Kinds, k)
			}
		}
	}
	slices.Sort(c.Kinds)
	return c
}

// Registered reports whether the registry registers kind.
func (c *Catalog) Registered(kind string) bool { return c.registered[kind] }

// Known reports whether kind is registered or handled by a live worker,
// compared case-insensitively as toggle keys are.
func (c *Catalog) Known(kind string) bool {
	return slices.ContainsFunc(c.Kinds, func(k string) bool { return strings.EqualFold(k, kind) })
}

// FailClosed reports whether the registry registers kind fail-closed.
func (c *Catalog) FailClosed(kind string) bool {
	return c.reg != nil && c.reg.FailClosed(kind)
}

// Decide is the kind's decision and whether its state is known: a kind
// the registry does not register, with no toggle in either source, is on
// or off as its workers registered it.
func (c *Catalog) Decide(set toggles.Set, kind string) (d toggles.Decision, stateKnown bool) {
	d = set.Decide(kind, c.FailClosed(kind))
	return d, d.DecidedBy != toggles.SourceDefault || c.Registered(kind)
}

// ToggleRow is one kill switch as an operator sees it: a known kind, or a
// toggle key that names none. It is also the CLI's --json form.
type ToggleRow struct {
	// Kind is the kind, or the unknown key, lower-cased.
	Kind string `json:"kind"`
	// Known reports whether the kind is registered or handled by a live
	// worker; an unknown key switches nothing.
	Known bool `json:"known"`
	// Registered: the registry registers the kind. Live: a live worker
	// handles it.
	Registered bool `json:"registered"`
	Live       bool `json:"live"`
	// State is on, off or "?" (decided by a default the registry does not
	// know); empty for an unknown key.
	State string `json:"state,omitempty"`
	// DecidedBy is file, store or default; empty for an unknown key.
	DecidedBy string `json:"decided_by,omitempty"`
	// FailClosed is null when the registry does not register the kind.
	FailClosed *bool `json:"fail_closed"`
	// File is the file's value for the kind, null when it has no key.
	File *bool `json:"file"`
	// Store is the store's switch for the kind, null when there is none.
	Store *StoreToggle `json:"store"`
	// Suggestion is, for an unknown key, the closest known kind, if any is
	// close enough to be a typo.
	Suggestion string `json:"suggestion,omitempty"`
}

// StoreToggle is a switch in the store: its value, who set it, when and
// why.
type StoreToggle struct {
	Enabled bool      `json:"enabled"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// ToggleRows lists the known kinds, sorted, then the unknown keys, sorted,
// given the file's toggles (nil when no file is known) and the store's.
func ToggleRows(cat *Catalog, file map[string]bool, stored []twicetype.Toggle) []ToggleRow {
	set := toggles.NewSet(file, stored)
	rows := make([]ToggleRow, 0, len(cat.Kinds))
	for _, k := range cat.Kinds {
		d, stateKnown := cat.Decide(set, k)
		r := ToggleRow{
			Kind: k, Known: true, Registered: cat.Registered(k), Live: cat.Live[k],
			State: OnOff(d.Enabled), DecidedBy: string(d.DecidedBy),
		}
		if !stateKnown {
			r.State = "?"
		}
		if r.Registered {
			fc := d.FailClosed
			r.FailClosed = &fc
		}
		fillSources(&r, d)
		rows = append(rows, r)
	}
	for _, u := range toggles.Unknown(set.Keys(), cat.Kinds) {
		r := ToggleRow{Kind: u.Key, Suggestion: u.Suggestion}
		fillSources(&r, set.Decide(u.Key, false))
		rows = append(rows, r)
	}
	return rows
}

func fillSources(r *ToggleRow, d toggles.Decision) {
	if d.FileSet {
		v := d.FileEnabled
		r.File = &v
	}
	if d.StoreSet {
		r.Store = &StoreToggle{Enabled: d.Store.Enabled, By: d.Store.By, Reason: d.Store.Reason, At: d.Store.At}
	}
}

// OnOff spells a switch state.
func OnOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
