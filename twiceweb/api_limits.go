package twiceweb

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// The API's runtime limits: the limited kinds with their usage, a kind's
// limits and a queue's concurrency overridden and reset, and the limit
// history (Client.LimitList, LimitSet, LimitReset, QueueConcurrencySet,
// QueueConcurrencyReset, LimitHistory).

// apiRate is a rate limit: at most limit starts per period (a Go
// duration, e.g. "1s").
type apiRate struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

func newAPIRate(r twice.RateLimit) *apiRate {
	if r.IsZero() {
		return nil
	}
	return &apiRate{Limit: r.Limit, Period: r.PeriodText()}
}

// apiLimits is a kind's limits; 0 and an absent rate are no limit.
type apiLimits struct {
	GlobalConcurrency    int      `json:"global_concurrency"`
	KeyConcurrency       int      `json:"key_concurrency"`
	KeyOrderSkipsRetries bool     `json:"key_order_skips_retries"`
	RateLimit            *apiRate `json:"rate_limit,omitempty"`
	KeyRateLimit         *apiRate `json:"key_rate_limit,omitempty"`
}

func newAPILimits(l twice.KindLimit) apiLimits {
	return apiLimits{GlobalConcurrency: l.Global, KeyConcurrency: l.PerKey, KeyOrderSkipsRetries: l.KeyOrderSkipsRetries,
		RateLimit: newAPIRate(l.Rate), KeyRateLimit: newAPIRate(l.KeyRate)}
}

// apiOverride is a runtime override: a kind's limits or a queue's
// concurrency, who set it, when and why.
type apiOverride struct {
	Scope       string     `json:"scope"`
	Name        string     `json:"name"`
	Limits      *apiLimits `json:"limits,omitempty"`
	Concurrency int        `json:"concurrency,omitempty"`
	// By, Reason and At are absent on a side of a history change.
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// Removed is set on the answer of a reset: this override is gone.
	Removed bool `json:"removed,omitempty"`
}

func newAPIOverride(o *twice.LimitOverride) *apiOverride {
	if o == nil {
		return nil
	}
	out := &apiOverride{Scope: string(o.Scope), Name: o.Name, Concurrency: o.Concurrency, By: o.By, Reason: o.Reason, At: o.At.UTC()}
	if o.Scope == twicetype.LimitScopeKind {
		l := newAPILimits(o.Limit)
		out.Limits = &l
	}
	return out
}

// apiLimitUsage is one limited kind: its limits in force, its compiled
// ones, the override if any, and its usage.
type apiLimitUsage struct {
	Kind string `json:"kind"`
	apiLimits
	Compiled  apiLimits    `json:"compiled"`
	Override  *apiOverride `json:"override"`
	Running   int          `json:"running"`
	Due       int          `json:"due"`
	Throttled int          `json:"throttled"`
	Keys      int          `json:"keys"`
	BusyKeys  int          `json:"busy_keys"`
	RateUsed  int          `json:"rate_used"`
}

// limitsResponse is GET /api/v1/limits.
type limitsResponse struct {
	Kinds []apiLimitUsage `json:"kinds"`
	// Queues are the queues whose concurrency an override sets.
	Queues []apiOverride `json:"queues"`
}

func (a *api) limits(r *http.Request, _ *caller) (int, any, error) {
	usage, err := a.h.client.LimitList(r.Context())
	if err != nil {
		return 0, nil, err
	}
	overrides, err := a.h.client.LimitOverrideList(r.Context())
	if err != nil {
		return 0, nil, err
	}
	out := limitsResponse{Kinds: []apiLimitUsage{}, Queues: []apiOverride{}}
	for _, u := range usage {
		out.Kinds = append(out.Kinds, apiLimitUsage{Kind: u.Kind, apiLimits: newAPILimits(u.Limit), Compiled: newAPILimits(u.Compiled),
			Override: newAPIOverride(u.Override), Running: u.Running, Due: u.Due, Throttled: u.Throttled,
			Keys: u.Keys, BusyKeys: u.BusyKeys, RateUsed: u.RateUsed})
	}
	for _, o := range overrides {
		if o.Scope == twicetype.LimitScopeQueue {
			out.Queues = append(out.Queues, *newAPIOverride(&o))
		}
	}
	return http.StatusOK, out, nil
}

// limitRequest is the body of PUT /api/v1/kinds/{kind}/limits: the limits to
// change (an absent one is kept, 0 lifts it) and why. A rate is written
// "N/PERIOD" ("100/1s"), or "0" for none.
type limitRequest struct {
	GlobalConcurrency *int    `json:"global_concurrency"`
	KeyConcurrency    *int    `json:"key_concurrency"`
	RateLimit         *string `json:"rate_limit"`
	KeyRateLimit      *string `json:"key_rate_limit"`
	Reason            string  `json:"reason"`
}

func (a *api) setLimit(r *http.Request, c *caller) (int, any, error) {
	var req limitRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	p := &twice.LimitSetParams{Kind: r.PathValue("kind"), Global: req.GlobalConcurrency, PerKey: req.KeyConcurrency,
		By: c.name, Reason: req.Reason}
	for _, rt := range []struct {
		name string
		text *string
		dst  **twice.RateLimit
	}{{"rate_limit", req.RateLimit, &p.Rate}, {"key_rate_limit", req.KeyRateLimit, &p.KeyRate}} {
		if rt.text == nil {
			continue
		}
		rl, err := twice.ParseRateLimit(*rt.text)
		if err != nil {
			return 0, nil, badRequest(fmt.Sprintf("%s: %v", rt.name, err))
		}
		*rt.dst = &rl
	}
	res, err := a.h.client.LimitSet(r.Context(), p)
	if err != nil {
		return 0, nil, kindPathError(err)
	}
	return http.StatusOK, newAPIOverride(&res.Override), nil
}

func (a *api) resetLimit(r *http.Request, c *caller) (int, any, error) {
	var req reasonRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	res, err := a.h.client.LimitReset(r.Context(), &twice.LimitResetParams{Kind: r.PathValue("kind"), By: c.name, Reason: req.Reason})
	if err != nil {
		return 0, nil, noOverrideError(err)
	}
	out := newAPIOverride(&res.Override)
	out.Removed = true
	return http.StatusOK, out, nil
}

// kindPathError makes a kind nothing knows, which the path names, a 404.
func kindPathError(err error) error {
	if errors.Is(err, twice.ErrUnknownKind) {
		return &notFound{err: err}
	}
	return err
}

// noOverrideError makes a reset of no override, which the path names, a
// 404.
func noOverrideError(err error) error {
	if errors.Is(err, twice.ErrNoOverride) {
		return &notFound{err: err}
	}
	return err
}

// concurrencyRequest is the body of PUT /api/v1/queues/{queue}/concurrency.
type concurrencyRequest struct {
	// Concurrency is required: how many of the queue's jobs each worker
	// runs at once.
	Concurrency *int   `json:"concurrency"`
	Reason      string `json:"reason"`
}

func (a *api) scaleQueue(r *http.Request, c *caller) (int, any, error) {
	var req concurrencyRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if req.Concurrency == nil {
		return 0, nil, badRequest(`the body has no "concurrency": send {"concurrency": 4, "reason": "..."}`)
	}
	res, err := a.h.client.QueueConcurrencySet(r.Context(), &twice.QueueConcurrencySetParams{Queue: r.PathValue("queue"),
		Concurrency: *req.Concurrency, By: c.name, Reason: req.Reason})
	if err != nil {
		return 0, nil, queueError(err)
	}
	return http.StatusOK, newAPIOverride(&res.Override), nil
}

func (a *api) unscaleQueue(r *http.Request, c *caller) (int, any, error) {
	var req reasonRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	res, err := a.h.client.QueueConcurrencyReset(r.Context(), &twice.QueueConcurrencyResetParams{Queue: r.PathValue("queue"),
		By: c.name, Reason: req.Reason})
	if err != nil {
		return 0, nil, noOverrideError(err)
	}
	out := newAPIOverride(&res.Override)
	out.Removed = true
	return http.StatusOK, out, nil
}

// apiLimitChange is one change of the limit history; a null previous is
// no override before (the compiled value), a null new a reset.
type apiLimitChange struct {
	ID       int64        `json:"id"`
	Scope    string       `json:"scope"`
	Name     string       `json:"name"`
	Previous *apiOverride `json:"previous"`
	New      *apiOverride `json:"new"`
	By       string       `json:"by"`
	Reason   string       `json:"reason"`
	At       time.Time    `json:"at"`
}

// limitHistoryResponse is a page of GET /api/v1/limits/history.
type limitHistoryResponse struct {
	Changes []apiLimitChange `json:"changes"`
	// Next is the "before" of the next page; absent on the last.
	Next int64 `json:"next,omitempty"`
}

func (a *api) limitHistory(r *http.Request, _ *caller) (int, any, error) {
	q := r.URL.Query()
	p := &twice.LimitHistoryParams{Kind: q.Get("kind"), Queue: q.Get("queue")}
	for name := range q {
		switch name {
		case "kind", "queue", "before", "limit":
		default:
			return 0, nil, badRequest(fmt.Sprintf("unknown query parameter %s: use kind, queue, before, limit", strconv.QuoteToASCII(name)))
		}
	}
	for _, n := range []struct {
		name string
		set  func(int64)
	}{{"before", func(v int64) { p.BeforeID = v }}, {"limit", func(v int64) { p.Limit = int(min(v, twice.JobListLimitMax)) }}} {
		if s := q.Get(n.name); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return 0, nil, badRequest(fmt.Sprintf("query parameter %q is %s: give a non-negative integer", n.name, strconv.QuoteToASCII(s)))
			}
			n.set(v)
		}
	}
	res, err := a.h.client.LimitHistory(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	out := limitHistoryResponse{Changes: []apiLimitChange{}, Next: res.Next}
	for _, ch := range res.Changes {
		out.Changes = append(out.Changes, apiLimitChange{ID: ch.ID, Scope: string(ch.Scope), Name: ch.Name,
			Previous: settingOverride(ch.Scope, ch.Name, ch.Previous), New: settingOverride(ch.Scope, ch.Name, ch.New),
			By: ch.By, Reason: ch.Reason, At: ch.At.UTC()})
	}
	return http.StatusOK, out, nil
}

// settingOverride is one side of a history change in the API's override
// shape, without who and when (the change's own).
func settingOverride(scope twicetype.LimitScope, name string, s *twicetype.LimitSetting) *apiOverride {
	if s == nil {
		return nil
	}
	o := newAPIOverride(&twice.LimitOverride{Scope: scope, Name: name, LimitSetting: *s})
	o.At = time.Time{}
	return o
}
