package twice

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ToggleSetParams describe a kill switch to store.
type ToggleSetParams struct {
	// Kind is the kind the switch turns on or off, case-insensitive.
	Kind    string
	Enabled bool
	By      string
	Reason  string
	// ExpiresAt, when set, is when the switch stops counting and the kind
	// follows its other sources and its registration default again. It
	// must be in the future.
	ExpiresAt time.Time
	// Force stores a switch for a kind no catalog, registry or live node
	// knows; without it such a kind is refused with the closest known one.
	Force bool
	// Source is recorded in the switch history. Defaults to "store".
	Source string
}

// ToggleUnsetParams name the kind whose stored switch is removed, who
// removes it and why.
type ToggleUnsetParams struct {
	Kind   string
	By     string
	Reason string
	// Source is recorded in the switch history. Defaults to "store".
	Source string
}

// ToggleHistoryParams select and page a switch history.
type ToggleHistoryParams struct {
	// Kind is the kind whose history is listed, case-insensitive; empty
	// lists every kind's.
	Kind string
	// BeforeID continues a listing: pass the previous page's Next.
	BeforeID int64
	// Limit is the page size. Defaults to JobListLimitDefault; at most
	// JobListLimitMax.
	Limit int
}

// ToggleHistoryResult is one page of switch changes, newest first.
type ToggleHistoryResult struct {
	Changes []twicetype.ToggleChange
	// Next is the BeforeID of the next page; 0 when this page is the last.
	Next int64
}

// ToggleSet stores a kill switch for a kind, on every node within about
// TogglePollIntervalDefault, and records the change in the switch history.
// A kind no catalog, registry or live node knows is refused (ErrUnknownKind,
// with "did you mean") unless p.Force is set; an expiry in the past is
// refused.
func (c *Client) ToggleSet(ctx context.Context, p *ToggleSetParams) error {
	return c.toggleSet(ctx, c.store, p)
}

// ToggleSetTx is ToggleSet in the caller's transaction.
func (c *Client) ToggleSetTx(ctx context.Context, tx any, p *ToggleSetParams) error {
	exec, err := c.adminExec("set kill switch", tx)
	if err != nil {
		return err
	}
	return c.toggleSet(ctx, exec, p)
}

// ToggleUnset removes a kind's stored kill switch, so the kind follows its
// other sources and its registration default again, and records the change
// in the switch history. It returns the switch removed; a kind with no
// stored switch is refused, naming the closest stored one.
func (c *Client) ToggleUnset(ctx context.Context, p *ToggleUnsetParams) (*twicetype.Toggle, error) {
	return c.toggleUnset(ctx, c.store, p)
}

// ToggleUnsetTx is ToggleUnset in the caller's transaction.
func (c *Client) ToggleUnsetTx(ctx context.Context, tx any, p *ToggleUnsetParams) (*twicetype.Toggle, error) {
	exec, err := c.adminExec("unset kill switch", tx)
	if err != nil {
		return nil, err
	}
	return c.toggleUnset(ctx, exec, p)
}

// ToggleList lists the stored kill switches in force (not expired), by
// kind. A kind's effective state also depends on the toggles file and its
// registration default; Catalog tells whether a kind is fail-closed.
func (c *Client) ToggleList(ctx context.Context) ([]twicetype.Toggle, error) {
	res, err := c.store.ToggleList(ctx, &twicestore.ToggleListParams{Now: c.now()})
	if err != nil {
		return nil, fmt.Errorf("twice: list kill switches: %w", err)
	}
	return res.Toggles, nil
}

// ToggleHistory lists who flipped a kind's switch, when, why, from what to
// what, newest first. A kind that is in no catalog or registry and has no
// history is refused (ErrUnknownKind, with "did you mean").
func (c *Client) ToggleHistory(ctx context.Context, p *ToggleHistoryParams) (*ToggleHistoryResult, error) {
	if p == nil {
		p = &ToggleHistoryParams{}
	}
	limit, err := historyPageSize(p.Limit, p.BeforeID)
	if err != nil {
		return nil, fmt.Errorf("twice: switch history: %w", err)
	}
	if err := checkFields(kindField(p.Kind)); err != nil {
		return nil, fmt.Errorf("twice: switch history: %w", err)
	}
	kind := strings.ToLower(strings.TrimSpace(p.Kind))
	res, err := c.store.ToggleHistory(ctx, &twicestore.ToggleHistoryParams{Kind: kind, BeforeID: p.BeforeID, Limit: limit + 1})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error says "list switch history"
	}
	if kind != "" && len(res.Changes) == 0 && p.BeforeID == 0 {
		known, err := c.allKnownKinds(ctx, c.store)
		if err != nil {
			return nil, fmt.Errorf("twice: switch history of %q: %w", p.Kind, err)
		}
		if !containsFold(known, kind) {
			return nil, fmt.Errorf("twice: switch history of %q: %w", p.Kind, unknownKindError(p.Kind, known))
		}
	}
	out := &ToggleHistoryResult{Changes: res.Changes}
	if len(out.Changes) > limit {
		out.Changes = out.Changes[:limit]
		out.Next = out.Changes[limit-1].ID
	}
	return out, nil
}

func (c *Client) toggleSet(ctx context.Context, exec twicestore.Executor, p *ToggleSetParams) error {
	if p == nil {
		return fmt.Errorf("twice: set kill switch: %w", invalidf("no kind named"))
	}
	// The raw kind is checked: ToLower would hide bytes that are not UTF-8.
	if err := checkFields(kindField(p.Kind), byField(p.By), reasonField(p.Reason), sourceField(p.Source)); err != nil {
		return fmt.Errorf("twice: set kill switch: %w", err)
	}
	kind := strings.ToLower(strings.TrimSpace(p.Kind))
	if err := ValidateKind(kind); err != nil {
		return fmt.Errorf("twice: set kill switch: %w", invalidf("%v", err))
	}
	now := c.now()
	if err := notFuture("expiry", p.ExpiresAt, now); err != nil {
		return fmt.Errorf("twice: set kill switch of %q: %w", kind, err)
	}
	if !p.Force {
		known, err := c.allKnownKinds(ctx, exec)
		if err != nil {
			return fmt.Errorf("twice: set kill switch of %q: %w", kind, err)
		}
		if !containsFold(known, kind) {
			return fmt.Errorf("twice: set kill switch: %w (Force stores it anyway, for a kind whose workers have not run yet)",
				unknownKindError(kind, known))
		}
	}
	by := byOr(p.By)
	err := exec.ToggleSet(ctx, &twicestore.ToggleSetParams{
		Toggle: twicetype.Toggle{Kind: kind, Enabled: p.Enabled, Reason: p.Reason, By: by, At: now, ExpiresAt: p.ExpiresAt},
		Source: p.Source,
	})
	if err != nil {
		return fmt.Errorf("twice: set kill switch: %w", err) // the store's error names the kind
	}
	attrs := []any{"kind", kind, "enabled", p.Enabled}
	if !p.ExpiresAt.IsZero() {
		attrs = append(attrs, "expires_at", p.ExpiresAt)
	}
	c.logAction(ctx, "kill switch set", by, p.Reason, attrs...)
	return nil
}

func (c *Client) toggleUnset(ctx context.Context, exec twicestore.Executor, p *ToggleUnsetParams) (*twicetype.Toggle, error) {
	if p == nil || strings.TrimSpace(p.Kind) == "" {
		return nil, fmt.Errorf("twice: unset kill switch: %w", invalidf("no kind named"))
	}
	if err := checkFields(kindField(p.Kind), byField(p.By), reasonField(p.Reason), sourceField(p.Source)); err != nil {
		return nil, fmt.Errorf("twice: unset kill switch: %w", err)
	}
	kind := strings.ToLower(strings.TrimSpace(p.Kind))
	now := c.now()
	res, err := exec.ToggleList(ctx, &twicestore.ToggleListParams{Now: now})
	if err != nil {
		return nil, fmt.Errorf("twice: unset kill switch of %q: %w", kind, err)
	}
	i := slices.IndexFunc(res.Toggles, func(t twicetype.Toggle) bool { return strings.EqualFold(t.Kind, kind) })
	if i < 0 {
		stored := make([]string, len(res.Toggles))
		for j, t := range res.Toggles {
			stored[j] = t.Kind
		}
		msg := fmt.Sprintf("no stored switch for %q: nothing to unset", kind)
		if u := toggles.Unknown([]string{kind}, stored); len(u) == 1 && u[0].Suggestion != "" {
			msg += "; did you mean " + u[0].Suggestion + "?"
		}
		return nil, fmt.Errorf("twice: unset kill switch: %w", invalidf("%s", msg))
	}
	old := res.Toggles[i]
	by := byOr(p.By)
	if err := exec.ToggleDelete(ctx, &twicestore.ToggleDeleteParams{Kind: kind, By: by, Reason: p.Reason, Source: p.Source, At: now}); err != nil {
		return nil, fmt.Errorf("twice: unset kill switch: %w", err) // the store's error names the kind
	}
	c.logAction(ctx, "kill switch unset", by, p.Reason, "kind", kind, "was_enabled", old.Enabled)
	return &old, nil
}

// historyPageSize is the page size of a history listing (switches,
// limits): limit, or JobListLimitDefault for 0, at most JobListLimitMax.
// A negative limit or cursor is refused.
func historyPageSize(limit int, beforeID int64) (int, error) {
	switch {
	case limit < 0:
		return 0, invalidf("limit %d is negative: give 0 for %d", limit, JobListLimitDefault)
	case beforeID < 0:
		return 0, invalidf("before id %d is negative", beforeID)
	}
	return min(cmp.Or(limit, JobListLimitDefault), JobListLimitMax), nil
}

// allKnownKinds lists the kinds this client registers, the catalog holds and
// live nodes handle, sorted, each once.
func (c *Client) allKnownKinds(ctx context.Context, exec twicestore.Executor) ([]string, error) {
	kinds := c.registry.Kinds()
	cat, err := exec.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("read the kind catalog: %w", err)
	}
	for _, k := range cat.Kinds {
		kinds = append(kinds, k.Kind)
	}
	nodes, err := exec.NodeList(ctx, &twicestore.NodeListParams{AliveSince: c.now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err // the store's error says "list nodes"
	}
	for _, n := range nodes {
		kinds = append(kinds, n.Kinds...)
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), nil
}

// kindField is a kind as an admin call gives it, checked before it is
// lower-cased (strings.ToLower would turn bytes that are not UTF-8 into
// U+FFFD and hide them). ToggleSet also holds it to ValidateKind.
func kindField(kind string) freetext.Field {
	return freetext.Field{Name: "job kind", Value: kind, Max: MaxKindBytes}
}

// sourceField is where a switch change came from, for its history.
func sourceField(source string) freetext.Field {
	return freetext.Field{Name: "source", Value: source, Max: MaxNameBytes}
}

// unknownKindError says kind is known nowhere, with the closest known kind.
func unknownKindError(kind string, known []string) error {
	msg := fmt.Sprintf("kind %q is in no catalog, not registered here and handled by no live worker", kind)
	if u := toggles.Unknown([]string{kind}, known); len(u) == 1 && u[0].Suggestion != "" {
		msg += "; did you mean " + u[0].Suggestion + "?"
	}
	return errUnknownKind("%s", msg)
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(k string) bool { return strings.EqualFold(k, s) })
}
