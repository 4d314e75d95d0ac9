package twice

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Runtime limits: an operator overrides a kind's limits (KindOpts'
// GlobalConcurrency, KeyConcurrency, RateLimit, KeyRateLimit) or a
// queue's concurrency (Config.Queues) without a deploy. The override is
// stored, with who, why and when in the limit history, and every worker
// applies it at its next read of the kill switches: within
// TogglePollInterval, at once on PostgreSQL, whose store notifies the
// change. Jobs already running go on; only new starts follow it. Reset
// goes back to the compiled value, which stays the default.

// LimitOverride is a runtime override of a kind's limits or a queue's
// concurrency, as stored: who set it, why and when.
type LimitOverride = twicetype.LimitOverride

// LimitChange is one change of the limit history.
type LimitChange = twicetype.LimitChange

// KindLimit is a kind's flow control: its global and per-key concurrency
// and its rate limits, as KindOpts sets them or an override replaces
// them.
type KindLimit = twicestore.KindLimit

// ErrNoOverride: a reset named a kind or queue with no limit override
// (usage): nothing to reset.
var ErrNoOverride error = &inputError{msg: "no limit override"}

// MinRatePeriod is the shortest RateLimit.Period.
const MinRatePeriod = twicestore.MinRatePeriod

// ParseRateLimit reads a rate limit as people write it: "N/PERIOD" with
// N at least 1 and PERIOD a duration of at least MinRatePeriod ("100/1s",
// "5/1m") or a bare unit ("100/s", "5/m", "2/h"); "0" is no limit (the
// zero RateLimit). The CLI's --rate and the dashboard's form take it.
func ParseRateLimit(s string) (RateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return RateLimit{}, nil
	}
	n, period, ok := strings.Cut(s, "/")
	limit, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || limit < 1 {
		return RateLimit{}, invalidf("%q is not a rate: write N/PERIOD, e.g. 100/1s or 5/m (N at least 1), or 0 for no rate limit", s)
	}
	period = strings.TrimSpace(period)
	if period == "s" || period == "m" || period == "h" {
		period = "1" + period
	}
	d, err := time.ParseDuration(period)
	if err != nil || d < MinRatePeriod {
		return RateLimit{}, invalidf("rate %q: the period %q is not a duration of at least %s: write e.g. 1s, 5m or 1h", s, period, MinRatePeriod)
	}
	return RateLimit{Limit: limit, Period: d}, nil
}

// QueueConcurrencyMax is the most jobs of one queue a concurrency
// override lets each worker run at once.
const QueueConcurrencyMax = 10_000

// LimitSetParams describe a kind's limits to override. A nil field keeps
// its value in force (the override's, else the compiled one); a zero one
// lifts that limit.
type LimitSetParams struct {
	// Kind is the kind to limit, case-insensitive; a registry, the catalog
	// or a live worker must know it.
	Kind string
	// Global is the most jobs of the kind running at once across every
	// node.
	Global *int
	// PerKey is the most jobs of one concurrency key running at once;
	// only a kind registered with a concurrency key has keys.
	PerKey *int
	// Rate bounds the kind's starts per period; KeyRate one key's.
	Rate    *RateLimit
	KeyRate *RateLimit
	By      string
	Reason  string
}

// LimitResetParams name the kind whose override is removed, who removes
// it and why.
type LimitResetParams struct {
	Kind   string
	By     string
	Reason string
}

// QueueConcurrencySetParams describe a queue's concurrency to override:
// the most of its jobs each worker that works it runs at once.
type QueueConcurrencySetParams struct {
	Queue string
	// Concurrency is from 1 to QueueConcurrencyMax. A worker's MaxWorkers
	// still bounds its jobs over all queues, unless it was left to its
	// default (the sum of the queues' concurrency), which follows.
	Concurrency int
	By          string
	Reason      string
}

// QueueConcurrencyResetParams name the queue whose override is removed,
// who removes it and why.
type QueueConcurrencyResetParams struct {
	Queue  string
	By     string
	Reason string
}

// LimitOverrideResult is an override as stored by a set, or removed by a
// reset, with the one it replaced.
type LimitOverrideResult struct {
	Override LimitOverride
	// Previous is the override a set replaced; nil when none was set.
	Previous *LimitOverride
}

// LimitHistoryParams select and page the limit history.
type LimitHistoryParams struct {
	// Kind or Queue, at most one, lists that override's history; neither
	// lists every one's.
	Kind  string
	Queue string
	// BeforeID continues a listing: pass the previous page's Next.
	BeforeID int64
	// Limit is the page size. Defaults to JobListLimitDefault; at most
	// JobListLimitMax.
	Limit int
}

// LimitHistoryResult is one page of limit changes, newest first.
type LimitHistoryResult struct {
	Changes []LimitChange
	// Next is the BeforeID of the next page; 0 when this page is the last.
	Next int64
}

// LimitSet overrides a kind's limits on every worker, from their next
// read of the kill switches on (within TogglePollInterval; at once on
// PostgreSQL), and records the change in the limit history. Running jobs
// go on; new starts follow the new limits. A kind nothing knows is refused
// (ErrUnknownKind), as are negative limits, a rate with no period, and a
// per-key limit for a kind whose jobs carry no concurrency key.
func (c *Client) LimitSet(ctx context.Context, p *LimitSetParams) (*LimitOverrideResult, error) {
	return c.limitSet(ctx, c.store, p)
}

// LimitSetTx is LimitSet in the caller's transaction.
func (c *Client) LimitSetTx(ctx context.Context, tx any, p *LimitSetParams) (*LimitOverrideResult, error) {
	exec, err := c.adminExec("set limit", tx)
	if err != nil {
		return nil, err
	}
	return c.limitSet(ctx, exec, p)
}

// LimitReset removes a kind's override: every worker goes back to the
// kind's compiled limits. A kind with no override is refused.
func (c *Client) LimitReset(ctx context.Context, p *LimitResetParams) (*LimitOverrideResult, error) {
	return c.limitReset(ctx, c.store, p)
}

// LimitResetTx is LimitReset in the caller's transaction.
func (c *Client) LimitResetTx(ctx context.Context, tx any, p *LimitResetParams) (*LimitOverrideResult, error) {
	exec, err := c.adminExec("reset limit", tx)
	if err != nil {
		return nil, err
	}
	return c.limitReset(ctx, exec, p)
}

// QueueConcurrencySet overrides how many jobs of a queue each worker that
// works it runs at once, as LimitSet does a kind's limits. Lowered, the
// running jobs finish and fewer start; raised, more start at once. A
// queue nothing knows is refused (ErrUnknownQueue).
func (c *Client) QueueConcurrencySet(ctx context.Context, p *QueueConcurrencySetParams) (*LimitOverrideResult, error) {
	return c.queueConcurrencySet(ctx, c.store, p)
}

// QueueConcurrencySetTx is QueueConcurrencySet in the caller's
// transaction.
func (c *Client) QueueConcurrencySetTx(ctx context.Context, tx any, p *QueueConcurrencySetParams) (*LimitOverrideResult, error) {
	exec, err := c.adminExec("set queue concurrency", tx)
	if err != nil {
		return nil, err
	}
	return c.queueConcurrencySet(ctx, exec, p)
}

// QueueConcurrencyReset removes a queue's concurrency override: each
// worker goes back to its Config.Queues value. A queue with no override
// is refused.
func (c *Client) QueueConcurrencyReset(ctx context.Context, p *QueueConcurrencyResetParams) (*LimitOverrideResult, error) {
	return c.queueConcurrencyReset(ctx, c.store, p)
}

// QueueConcurrencyResetTx is QueueConcurrencyReset in the caller's
// transaction.
func (c *Client) QueueConcurrencyResetTx(ctx context.Context, tx any, p *QueueConcurrencyResetParams) (*LimitOverrideResult, error) {
	exec, err := c.adminExec("reset queue concurrency", tx)
	if err != nil {
		return nil, err
	}
	return c.queueConcurrencyReset(ctx, exec, p)
}

// LimitOverrideList lists the overrides in force: kinds' limits, then
// queues' concurrency, each by name.
func (c *Client) LimitOverrideList(ctx context.Context) ([]LimitOverride, error) {
	res, err := c.store.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error says "list limit overrides"
	}
	return res.Overrides, nil
}

// LimitHistory lists who changed a limit override, when, why, from what
// to what, newest first.
func (c *Client) LimitHistory(ctx context.Context, p *LimitHistoryParams) (*LimitHistoryResult, error) {
	if p == nil {
		p = &LimitHistoryParams{}
	}
	limit, err := historyPageSize(p.Limit, p.BeforeID)
	if err != nil {
		return nil, fmt.Errorf("twice: limit history: %w", err)
	}
	if p.Kind != "" && p.Queue != "" {
		return nil, fmt.Errorf("twice: limit history: %w", invalidf("both a kind and a queue named: name one, or neither for every change"))
	}
	if err := checkFields(kindField(p.Kind), queueField(p.Queue)); err != nil {
		return nil, fmt.Errorf("twice: limit history: %w", err)
	}
	q := &twicestore.LimitHistoryParams{BeforeID: p.BeforeID, Limit: limit + 1}
	switch {
	case p.Kind != "":
		q.Scope, q.Name = twicetype.LimitScopeKind, strings.ToLower(strings.TrimSpace(p.Kind))
	case p.Queue != "":
		q.Scope, q.Name = twicetype.LimitScopeQueue, p.Queue
	}
	res, err := c.store.LimitHistory(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error says "list limit history"
	}
	out := &LimitHistoryResult{Changes: res.Changes}
	if len(out.Changes) > limit {
		out.Changes = out.Changes[:limit]
		out.Next = out.Changes[limit-1].ID
	}
	return out, nil
}

// queueField is a queue as an admin call gives it, checked before it is
// held to ValidateQueue, so bad bytes get freetext's message.
func queueField(queue string) freetext.Field {
	return freetext.Field{Name: "queue", Value: queue, Max: MaxQueueBytes}
}

func (c *Client) limitSet(ctx context.Context, exec twicestore.Executor, p *LimitSetParams) (*LimitOverrideResult, error) {
	if p == nil || strings.TrimSpace(p.Kind) == "" {
		return nil, fmt.Errorf("twice: set limit: %w", invalidf("no kind named"))
	}
	if err := checkFields(kindField(p.Kind), byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: set limit: %w", err)
	}
	if p.Global == nil && p.PerKey == nil && p.Rate == nil && p.KeyRate == nil {
		return nil, fmt.Errorf("twice: set limit of %q: %w", p.Kind, invalidf("no limit given: set the global, per-key, rate or key-rate limit (0 lifts one)"))
	}
	kind := strings.ToLower(strings.TrimSpace(p.Kind))
	compiled, current, err := c.kindLimits(ctx, exec, kind)
	if err != nil {
		return nil, err
	}
	next := current
	if p.Global != nil {
		next.Global = *p.Global
	}
	if p.PerKey != nil {
		next.PerKey = *p.PerKey
	}
	if p.Rate != nil {
		next.Rate = *p.Rate
	}
	if p.KeyRate != nil {
		next.KeyRate = *p.KeyRate
	}
	next.KeyOrderSkipsRetries = next.KeyOrderSkipsRetries && next.PerKey > 0 // it only says how the per-key order goes
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("twice: set limit of %q: %w", kind, invalidf("%v", err))
	}
	keyedNow := compiled.PerKey > 0 || !compiled.KeyRate.IsZero()
	if (next.PerKey > 0 || !next.KeyRate.IsZero()) && !keyedNow {
		return nil, fmt.Errorf("twice: set limit of %q: %w", kind, invalidf(
			"its jobs carry no concurrency key (its registration has no per-key limit, so none is taken at enqueue): a per-key limit would hold nothing; register the kind with KindOpts.ConcurrencyKey and a per-key limit first"))
	}
	return c.storeOverride(ctx, exec, "limit set", twicetype.LimitOverride{Scope: twicetype.LimitScopeKind, Name: kind,
		LimitSetting: twicetype.LimitSetting{Limit: next}, By: byOr(p.By), Reason: p.Reason, At: c.now()})
}

func (c *Client) limitReset(ctx context.Context, exec twicestore.Executor, p *LimitResetParams) (*LimitOverrideResult, error) {
	if p == nil || strings.TrimSpace(p.Kind) == "" {
		return nil, fmt.Errorf("twice: reset limit: %w", invalidf("no kind named"))
	}
	if err := checkFields(kindField(p.Kind), byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: reset limit: %w", err)
	}
	return c.clearOverride(ctx, exec, "limit reset", twicetype.LimitScopeKind, strings.ToLower(strings.TrimSpace(p.Kind)), p.By, p.Reason)
}

func (c *Client) queueConcurrencySet(ctx context.Context, exec twicestore.Executor, p *QueueConcurrencySetParams) (*LimitOverrideResult, error) {
	if p == nil {
		return nil, fmt.Errorf("twice: set queue concurrency: %w", invalidf("no queue named"))
	}
	if err := checkFields(queueField(p.Queue), byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: set queue concurrency: %w", err)
	}
	if p.Concurrency < 1 || p.Concurrency > QueueConcurrencyMax {
		return nil, fmt.Errorf("twice: set queue concurrency of %q: %w", p.Queue, invalidf(
			"concurrency %d is not from 1 to %d (pause the queue to run none of its jobs)", p.Concurrency, QueueConcurrencyMax))
	}
	now := c.now()
	if err := c.checkQueueArg(ctx, exec, "set concurrency of", p.Queue, now); err != nil {
		return nil, err
	}
	return c.storeOverride(ctx, exec, "queue concurrency set", twicetype.LimitOverride{Scope: twicetype.LimitScopeQueue, Name: p.Queue,
		LimitSetting: twicetype.LimitSetting{Concurrency: p.Concurrency}, By: byOr(p.By), Reason: p.Reason, At: now})
}

func (c *Client) queueConcurrencyReset(ctx context.Context, exec twicestore.Executor, p *QueueConcurrencyResetParams) (*LimitOverrideResult, error) {
	if p == nil || p.Queue == "" {
		return nil, fmt.Errorf("twice: reset queue concurrency: %w", invalidf("no queue named"))
	}
	if err := checkFields(queueField(p.Queue), byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: reset queue concurrency: %w", err)
	}
	return c.clearOverride(ctx, exec, "queue concurrency reset", twicetype.LimitScopeQueue, p.Queue, p.By, p.Reason)
}

// storeOverride stores o and logs the action.
func (c *Client) storeOverride(ctx context.Context, exec twicestore.Executor, action string, o twicetype.LimitOverride) (*LimitOverrideResult, error) {
	res, err := exec.LimitOverrideSet(ctx, &twicestore.LimitOverrideSetParams{Override: o})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error names the kind or queue
	}
	out := &LimitOverrideResult{Override: o, Previous: res.Previous}
	attrs := []any{string(o.Scope), o.Name, "now", o.Text(o.Scope)}
	if res.Previous != nil {
		attrs = append(attrs, "was", res.Previous.Text(o.Scope))
	}
	c.logAction(ctx, action, o.By, o.Reason, attrs...)
	return out, nil
}

// clearOverride removes the override of scope and name, refusing one
// that is not set (with the closest that is), and logs the action.
func (c *Client) clearOverride(ctx context.Context, exec twicestore.Executor, action string, scope twicetype.LimitScope, name, by, reason string) (*LimitOverrideResult, error) {
	by = byOr(by)
	res, err := exec.LimitOverrideClear(ctx, &twicestore.LimitOverrideClearParams{Scope: scope, Name: name, By: by, Reason: reason, At: c.now()})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	if res.Previous == nil {
		list, err := exec.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
		if err != nil {
			return nil, fmt.Errorf("twice: %s of %s %q: %w", action, scope, name, err)
		}
		var set []string
		for _, o := range list.Overrides {
			if o.Scope == scope {
				set = append(set, o.Name)
			}
		}
		msg := fmt.Sprintf("%s %q has none: nothing to reset", scope, name)
		if len(set) > 0 {
			msg += fmt.Sprintf(" (overridden: %s)", strings.Join(set, ", "))
		}
		return nil, fmt.Errorf("twice: %s: %w: %s", action, ErrNoOverride, msg)
	}
	c.logAction(ctx, action, by, reason, string(scope), name, "was", res.Previous.Text(scope))
	return &LimitOverrideResult{Override: *res.Previous, Previous: res.Previous}, nil
}

// kindLimits returns a kind's compiled limits (this client's registry's,
// else the catalog's) and those in force (its override's, else the
// compiled). A kind no registry, catalog or live worker knows is refused
// with ErrUnknownKind.
func (c *Client) kindLimits(ctx context.Context, exec twicestore.Executor, kind string) (compiled, current KindLimit, err error) {
	known, err := c.allKnownKinds(ctx, exec)
	if err != nil {
		return compiled, current, fmt.Errorf("twice: set limit of %q: %w", kind, err)
	}
	if !slices.Contains(known, kind) {
		return compiled, current, fmt.Errorf("twice: set limit: %w", unknownKindError(kind, known))
	}
	compiled, err = c.compiledLimit(ctx, exec, kind)
	if err != nil {
		return compiled, current, err
	}
	current = compiled
	res, err := exec.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		return compiled, current, fmt.Errorf("twice: set limit of %q: %w", kind, err)
	}
	for _, o := range res.Overrides {
		if o.Scope == twicetype.LimitScopeKind && o.Name == kind {
			current = o.Limit
		}
	}
	return compiled, current, nil
}

// compiledLimit is a kind's limits as registered: this client's
// registry's, else what the catalog holds for it.
func (c *Client) compiledLimit(ctx context.Context, exec twicestore.Executor, kind string) (KindLimit, error) {
	if e := c.registry.lookup(kind); e != nil {
		return e.opts.storeLimit(), nil
	}
	cat, err := exec.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return KindLimit{}, fmt.Errorf("twice: read the kind catalog: %w", err)
	}
	for _, k := range cat.Kinds {
		if k.Kind == kind {
			return k.Limit, nil
		}
	}
	return KindLimit{}, nil
}
