package twiceweb

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
)

// kindCatalog is what the dashboard knows about kinds: the client's
// catalog (the kinds workers published, merged with those this binary
// registers). A kind in it has a known fail-closed flag and known
// sensitive fields; a kind in no catalog (its workers predate the catalog,
// or it only has jobs) has neither, so the dashboard assumes the safe
// side: its args are hidden and it is treated as fail-closed.
type kindCatalog struct {
	byKind map[string]twice.CatalogKind // by lower-cased kind
	kinds  []string
}

func (h *Handler) catalog(ctx context.Context) (*kindCatalog, error) {
	list, err := h.client.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	c := &kindCatalog{byKind: make(map[string]twice.CatalogKind, len(list))}
	for _, k := range list {
		c.byKind[strings.ToLower(k.Kind)] = k
		c.kinds = append(c.kinds, k.Kind)
	}
	return c, nil
}

// lookup returns the catalog's entry for kind, case-insensitively.
func (c *kindCatalog) lookup(kind string) (twice.CatalogKind, bool) {
	k, ok := c.byKind[strings.ToLower(kind)]
	return k, ok
}

// Kinds lists the catalogued kinds (ops.Kinds).
func (c *kindCatalog) Kinds() []string { return c.kinds }

// FailClosed reports whether a catalogued kind is fail-closed (ops.Kinds).
func (c *kindCatalog) FailClosed(kind string) bool {
	k, ok := c.lookup(kind)
	return ok && k.FailClosed
}

// sensitive lists kind's sensitive args fields
// (twice.CatalogKind.SensitiveFields, the rule the CLI redacts by too); ok
// is false for a kind in no catalog, whose sensitive fields nobody can
// tell.
func (c *kindCatalog) sensitive(kind string) (fields []string, ok bool) {
	k, ok := c.lookup(kind)
	if !ok {
		return nil, false
	}
	return k.SensitiveFields(), true
}

// switchRow is one kill switch on the switches page.
type switchRow struct {
	ops.ToggleRow
	// Catalogued: the kind is in the catalog (or registered here), so its
	// fail-closed flag is known. A known kind that is not is treated as
	// fail-closed: Assumed marks a state decided by that assumption.
	Catalogued bool
	Assumed    bool
	// LastSeen is when a worker last published the kind; zero for a kind
	// only this binary registers.
	LastSeen time.Time
	// Expires is when the stored switch stops counting; zero for never.
	Expires time.Time
}

// toggleRows computes the switches as 'twice toggles ls' does, with the
// state of every catalogued kind known.
func (h *Handler) toggleRows(r *http.Request) ([]switchRow, *ops.Catalog, error) {
	ctx := r.Context()
	var file map[string]bool
	if h.opts.TogglesFile != "" {
		var err error
		if file, err = toggles.LoadFile(h.opts.TogglesFile); err != nil {
			return nil, nil, err
		}
	}
	kc, err := h.catalog(ctx)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := h.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: time.Now().Add(-ops.NodeAliveWindow)})
	if err != nil {
		return nil, nil, err
	}
	cat := ops.NewCatalog(kc, nodes)
	stored, err := h.client.ToggleList(ctx)
	if err != nil {
		return nil, nil, err
	}
	set := toggles.NewSet(file, stored)
	var rows []switchRow
	for _, tr := range ops.ToggleRows(cat, file, stored) {
		row := switchRow{ToggleRow: tr}
		for _, st := range stored {
			if strings.EqualFold(st.Kind, tr.Kind) {
				row.Expires = st.ExpiresAt
			}
		}
		if k, ok := kc.lookup(tr.Kind); ok {
			row.Catalogued, row.LastSeen = true, k.LastSeen
			row.Live = row.Live || k.Live
		} else if tr.Known && tr.State == "?" {
			// Decided by a default nobody here knows: assume the safe one.
			row.State, row.Assumed = ops.OnOff(set.Decide(tr.Kind, true).Enabled), true
		}
		rows = append(rows, row)
	}
	return rows, cat, nil
}
