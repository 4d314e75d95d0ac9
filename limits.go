package twice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Flow control across the cluster: KindOpts.GlobalConcurrency,
// KeyConcurrency, RateLimit and KeyRateLimit. The limits are enforced by
// the store inside each fetch (see twicestore.KindLimit), so they hold
// across every node and process sharing the database, and a slot is a
// running job: a crashed node's slots free when its jobs are rescued.
// Every node must register the same limits for a kind; a node that
// registers none fetches the kind unlimited.

// RateLimit allows at most Limit job starts of a kind (or of one
// concurrency key) in any window of length Period, across every node. The
// store keeps a sliding-window log of starts, so the limit is exact on the
// fetchers' clocks, with no burst beyond Limit; twicestore.RateLimit says
// what bounds its accuracy. The zero value is no limit.
type RateLimit = twicestore.RateLimit

// LimitUsage is one limited kind's limits and current usage: running jobs
// (the slots in use), due jobs, and the due jobs its limits hold back
// (Throttled: waiting for a slot, neither orphaned nor stuck).
type LimitUsage = twicestore.LimitUsage

// ConcurrencyKeyer is implemented by args that give their own concurrency
// key (a tenant, a customer) for KindOpts.KeyConcurrency and KeyRateLimit,
// instead of naming a field in KindOpts.ConcurrencyKey. An empty key is no
// key: the job is then limited only kind-wide. A key is at most
// MaxConcurrencyKeyBytes.
type ConcurrencyKeyer interface {
	ConcurrencyKey() string
}

// MaxConcurrencyKeyBytes caps a job's concurrency key: an enqueue whose
// key is longer is refused (ErrInvalidArgs).
const MaxConcurrencyKeyBytes = twicestore.MaxConcurrencyKeyBytes

// storeLimit is the kind's limits as the store takes them.
func (o *KindOpts) storeLimit() twicestore.KindLimit {
	return twicestore.KindLimit{
		Global:               o.GlobalConcurrency,
		PerKey:               o.KeyConcurrency,
		KeyOrderSkipsRetries: o.KeyOrderSkipsRetries,
		Rate:                 o.RateLimit,
		KeyRate:              o.KeyRateLimit,
	}
}

// checkLimits refuses, at registration, limits the store could not
// enforce or a key it could not take from the args.
func checkLimits(t reflect.Type, o *KindOpts) error {
	l := o.storeLimit()
	if o.KeyOrderSkipsRetries && o.KeyConcurrency == 0 {
		return errors.New("KindOpts.KeyOrderSkipsRetries is set but KeyConcurrency is not: there is no per-key order to skip; set KeyConcurrency, or drop it")
	}
	if err := l.Validate(); err != nil {
		return err
	}
	keyed := l.PerKey > 0 || !l.KeyRate.IsZero()
	_, byMethod := reflect.Zero(t).Interface().(ConcurrencyKeyer)
	switch {
	case o.ConcurrencyKey != "" && byMethod:
		return fmt.Errorf("KindOpts.ConcurrencyKey names field %q, yet %s has a ConcurrencyKey method: keep one of them", o.ConcurrencyKey, t)
	case keyed && o.ConcurrencyKey == "" && !byMethod:
		return fmt.Errorf("a per-key limit needs a key: name an args field in KindOpts.ConcurrencyKey, or give %s a ConcurrencyKey() string method", t)
	case !keyed && o.ConcurrencyKey != "":
		return fmt.Errorf("KindOpts.ConcurrencyKey names field %q but no per-key limit uses it: set KeyConcurrency or KeyRateLimit, or drop it", o.ConcurrencyKey)
	case o.ConcurrencyKey == "":
		return nil
	}
	fields := ArgFields(t)
	if fields == nil {
		return fmt.Errorf("KindOpts.ConcurrencyKey names field %q, but %s encodes itself, so its fields are unknown: give it a ConcurrencyKey() string method instead", o.ConcurrencyKey, t)
	}
	for _, f := range fields {
		if f.Name != o.ConcurrencyKey {
			continue
		}
		switch f.Type {
		case twicetype.ArgTypeString, twicetype.ArgTypeNumber, twicetype.ArgTypeInteger, twicetype.ArgTypeBoolean:
			return nil
		}
		return fmt.Errorf("KindOpts.ConcurrencyKey names field %q of JSON type %s: use a string, number or boolean field", o.ConcurrencyKey, f.Type)
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	return fmt.Errorf("KindOpts.ConcurrencyKey names field %q, which %s does not have (its JSON fields: %v): name one of them", o.ConcurrencyKey, t, names)
}

// concurrencyKey is the key of a job of e's kind with args raw: the named
// field's value (a string as is, a number or boolean as written), or what
// the args' ConcurrencyKey method returns. A missing or null field is no
// key.
func (e *kindEntry) concurrencyKey(raw []byte) (string, error) {
	l := e.opts.storeLimit()
	if l.PerKey == 0 && l.KeyRate.IsZero() {
		return "", nil
	}
	var key string
	if e.opts.ConcurrencyKey == "" {
		v, err := e.decode(raw)
		if err != nil {
			return "", fmt.Errorf("concurrency key: %w", err)
		}
		k, ok := v.(ConcurrencyKeyer)
		if !ok {
			return "", nil
		}
		key = k.ConcurrencyKey()
	} else {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("concurrency key: %w", err)
		}
		v, ok := obj[e.opts.ConcurrencyKey]
		if !ok || string(v) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			key = s
		} else {
			key = string(v) // a number or boolean, as encoded
		}
	}
	if err := checkText("concurrency key", key, MaxConcurrencyKeyBytes); err != nil {
		return "", err
	}
	return key, nil
}

// limits returns the limits of every limited kind, for the fetch and the
// usage report; nil when no kind is limited, so fetches stay on the plain
// path.
func (r *Registry) limits() map[string]twicestore.KindLimit {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out map[string]twicestore.KindLimit
	for k, e := range r.kinds {
		if l := e.opts.storeLimit(); !l.IsZero() {
			if out == nil {
				out = map[string]twicestore.KindLimit{}
			}
			out[k] = l
		}
	}
	return out
}

// LimitList reports every limited kind, by kind: those this client
// registers with a limit, those live workers publish in the catalog with
// one, and those an override limits (see LimitSet). Each comes with its
// limits in force and its compiled ones, the override if any, its running
// jobs (the slots in use), its due jobs and how many of those the limits
// hold back (throttled: they wait for a slot or for the rate window, and
// start once one frees; they are neither orphaned nor stuck). A client
// made by NewClient without Start serves it.
func (c *Client) LimitList(ctx context.Context) ([]LimitUsage, error) {
	compiled := c.registry.limits()
	if compiled == nil {
		compiled = map[string]twicestore.KindLimit{}
	}
	cat, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: list limits: read the kind catalog: %w", err)
	}
	aliveSince := c.now().Add(-nodeAliveWindow)
	catalogued := make(map[string]twicestore.KindLimit, len(cat.Kinds))
	for _, k := range cat.Kinds {
		catalogued[k.Kind] = k.Limit
		if _, ours := compiled[k.Kind]; !ours && c.registry.lookup(k.Kind) == nil && !k.Limit.IsZero() && !k.LastSeen.Before(aliveSince) {
			compiled[k.Kind] = k.Limit
		}
	}
	overrides, err := c.store.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: list limits: %w", err)
	}
	limits := maps.Clone(compiled)
	byKind := map[string]*twicetype.LimitOverride{}
	for _, o := range overrides.Overrides {
		if o.Scope != twicetype.LimitScopeKind {
			continue
		}
		if _, ok := compiled[o.Name]; !ok {
			if e := c.registry.lookup(o.Name); e != nil {
				compiled[o.Name] = e.opts.storeLimit()
			} else {
				compiled[o.Name] = catalogued[o.Name]
			}
		}
		limits[o.Name] = o.Limit
		byKind[o.Name] = &o
	}
	if len(limits) == 0 {
		return nil, nil
	}
	res, err := c.store.LimitList(ctx, &twicestore.LimitListParams{Limits: limits})
	if err != nil {
		return nil, fmt.Errorf("twice: list limits: %w", err)
	}
	for i := range res.Kinds {
		u := &res.Kinds[i]
		u.Compiled, u.Override = compiled[u.Kind], byKind[u.Kind]
	}
	return res.Kinds, nil
}
