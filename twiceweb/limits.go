package twiceweb

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// limitsData is the flow-control page: every limited kind with its usage
// (those the dashboard's client registers, those live workers publish in
// the catalog, those an override limits), the queues with their
// concurrency overrides, and the latest changes of the limit history.
type limitsData struct {
	Kinds   []limitRow
	Queues  []queueLimitRow
	History []limitChangeRow
}

func (limitsData) page() string { return "limits" }

// limitHistoryShown is how many of the latest limit changes the page
// shows ('twice limits history' pages through them all).
const limitHistoryShown = 20

// limitRow is one limited kind as the limits page shows it: the usage,
// with its limits and counts put in words once here, so the template
// stays a layout.
type limitRow struct {
	twice.LimitUsage
	// Limits is the kind's limits in force in a few words: "global 10,
	// per key 1, rate 100/1s".
	Limits string
	// Compiled is the kind's registered limits in words, shown when an
	// override replaces them.
	Compiled string
	// Slots is the running jobs against the global limit ("3 / 10"), or
	// the running jobs alone without one.
	Slots string
	// Full: every global slot is taken, so due jobs wait for one.
	Full bool
	// Keyed: the kind has a per-key limit or rate, so Keys and BusyKeys
	// mean something.
	Keyed bool
	// Rate is the starts in the rate window against the limit ("42 / 100
	// per 1s"); empty without a kind-wide rate limit.
	Rate string
}

func kindLimitText(l twice.KindLimit) string {
	return twicetype.LimitSetting{Limit: l}.Text(twicetype.LimitScopeKind)
}

func newLimitRow(u twice.LimitUsage) limitRow {
	l := u.Limit
	row := limitRow{LimitUsage: u, Keyed: l.PerKey > 0 || !l.KeyRate.IsZero(), Slots: fmt.Sprint(u.Running),
		Limits: strings.Join(l.Phrases(), ", "), Compiled: kindLimitText(u.Compiled)}
	if row.Limits == "" {
		row.Limits = "no limit"
	}
	if l.Global > 0 {
		row.Slots = fmt.Sprintf("%d / %d", u.Running, l.Global)
		row.Full = u.Running >= l.Global
	}
	if !l.Rate.IsZero() {
		row.Rate = fmt.Sprintf("%d / %d per %s", u.RateUsed, l.Rate.Limit, l.Rate.PeriodText())
	}
	return row
}

// queueLimitRow is one queue with its concurrency override, if any.
type queueLimitRow struct {
	Name     string
	Override *twice.LimitOverride
}

// limitChangeRow is one change of the limit history, in words.
type limitChangeRow struct {
	twice.LimitChange
	From, To string
}

func settingText(scope twicetype.LimitScope, s *twicetype.LimitSetting) string {
	if s == nil {
		return "compiled"
	}
	return s.Text(scope)
}

// limits serves the flow-control page.
func (h *Handler) limits(r *http.Request) (string, any, error) {
	ctx := r.Context()
	usage, err := h.client.LimitList(ctx)
	if err != nil {
		return "", nil, err
	}
	d := limitsData{}
	for _, u := range usage {
		d.Kinds = append(d.Kinds, newLimitRow(u))
	}
	overrides, err := h.client.LimitOverrideList(ctx)
	if err != nil {
		return "", nil, err
	}
	queues, err := h.client.QueueList(ctx)
	if err != nil {
		return "", nil, err
	}
	byQueue := map[string]*twice.LimitOverride{}
	for _, o := range overrides {
		if o.Scope == twicetype.LimitScopeQueue {
			byQueue[o.Name] = &o
		}
	}
	for _, q := range queues {
		d.Queues = append(d.Queues, queueLimitRow{Name: q.Name, Override: byQueue[q.Name]})
		delete(byQueue, q.Name)
	}
	for _, o := range overrides { // a scaled queue no longer listed (no jobs, no worker)
		if byQueue[o.Name] != nil && o.Scope == twicetype.LimitScopeQueue {
			d.Queues = append(d.Queues, queueLimitRow{Name: o.Name, Override: byQueue[o.Name]})
		}
	}
	hist, err := h.client.LimitHistory(ctx, &twice.LimitHistoryParams{Limit: limitHistoryShown})
	if err != nil {
		return "", nil, err
	}
	for _, c := range hist.Changes {
		d.History = append(d.History, limitChangeRow{LimitChange: c, From: settingText(c.Scope, c.Previous), To: settingText(c.Scope, c.New)})
	}
	return "Limits", d, nil
}

// formCount reads an optional count of the form: nil when empty (keep the
// value in force), else a number at least 0.
func formCount(r *http.Request, name string) (*int, error) {
	s := strings.TrimSpace(r.PostForm.Get(name))
	if s == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return nil, badInputf("%s=%q is not a count: give a number, 0 for no limit, or leave it empty to keep it", name, s)
	}
	return &n, nil
}

// formRate reads an optional rate of the form (twice.ParseRateLimit):
// nil when empty.
func formRate(r *http.Request, name string) (*twice.RateLimit, error) {
	s := strings.TrimSpace(r.PostForm.Get(name))
	if s == "" {
		return nil, nil
	}
	rl, err := twice.ParseRateLimit(s)
	if err != nil {
		return nil, badInputf("%s: %v", name, err)
	}
	return &rl, nil
}

// setLimit overrides a kind's limits: the fields given, the others kept.
func (h *Handler) setLimit(r *http.Request, who string) (string, *confirmation, error) {
	kind := strings.TrimSpace(r.PostForm.Get("kind"))
	if kind == "" {
		return "", nil, badInputf("no kind given: say which kind to limit")
	}
	reason, err := formReason(r, "change the limits")
	if err != nil {
		return "", nil, err
	}
	p := &twice.LimitSetParams{Kind: kind, By: who, Reason: reason}
	if p.Global, err = formCount(r, "global"); err != nil {
		return "", nil, err
	}
	if p.PerKey, err = formCount(r, "per_key"); err != nil {
		return "", nil, err
	}
	if p.Rate, err = formRate(r, "rate"); err != nil {
		return "", nil, err
	}
	if p.KeyRate, err = formRate(r, "key_rate"); err != nil {
		return "", nil, err
	}
	res, err := h.client.LimitSet(r.Context(), p)
	if err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "set limit", "what", kind,
		"now", res.Override.Text(twicetype.LimitScopeKind), "reason", reason)
	return "/limits", nil, nil
}

func (h *Handler) resetLimit(r *http.Request, who string) (string, *confirmation, error) {
	kind := strings.TrimSpace(r.PostForm.Get("kind"))
	if kind == "" {
		return "", nil, badInputf("no kind given: say which kind's override to reset")
	}
	reason, err := formReason(r, "reset the limits")
	if err != nil {
		return "", nil, err
	}
	if _, err := h.client.LimitReset(r.Context(), &twice.LimitResetParams{Kind: kind, By: who, Reason: reason}); err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "reset limit", "what", kind, "reason", reason)
	return "/limits", nil, nil
}

func (h *Handler) scaleQueue(r *http.Request, who string) (string, *confirmation, error) {
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	if queue == "" {
		return "", nil, badInputf("no queue given: say which queue to scale")
	}
	reason, err := formReason(r, "scale the queue")
	if err != nil {
		return "", nil, err
	}
	s := strings.TrimSpace(r.PostForm.Get("concurrency"))
	n, err := strconv.Atoi(s)
	if err != nil {
		return "", nil, badInputf("concurrency=%q is not a number: give how many of the queue's jobs each worker runs at once", s)
	}
	if _, err := h.client.QueueConcurrencySet(r.Context(), &twice.QueueConcurrencySetParams{Queue: queue, Concurrency: n, By: who, Reason: reason}); err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "scale queue", "what", queue, "concurrency", n, "reason", reason)
	return "/limits", nil, nil
}

func (h *Handler) unscaleQueue(r *http.Request, who string) (string, *confirmation, error) {
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	if queue == "" {
		return "", nil, badInputf("no queue given: say which queue's override to reset")
	}
	reason, err := formReason(r, "reset the queue's concurrency")
	if err != nil {
		return "", nil, err
	}
	if _, err := h.client.QueueConcurrencyReset(r.Context(), &twice.QueueConcurrencyResetParams{Queue: queue, By: who, Reason: reason}); err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "reset queue concurrency", "what", queue, "reason", reason)
	return "/limits", nil, nil
}
