package twiceweb

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// confirmation is the page an action shows before it does something that
// needs a second look: it repeats the form with confirm=yes.
type confirmation struct {
	Message string
	Detail  string
	Action  string // the path the form posts to, under the base
	Button  string
	Cancel  string // where "cancel" goes, under the base
	Fields  []field
}

type field struct{ Name, Value string }

// confirmed reports whether the form carries the operator's confirmation;
// when it does not, it returns the confirmation page repeating the form.
func confirmed(r *http.Request, c *confirmation) (bool, *confirmation) {
	if r.PostForm.Get("confirm") == "yes" {
		return true, nil
	}
	for name, values := range r.PostForm {
		if name == "csrf" || name == "confirm" {
			continue
		}
		for _, v := range values {
			c.Fields = append(c.Fields, field{name, v})
		}
	}
	c.Action = r.URL.Path
	return false, c
}

// parseFilter reads state, timing, kind and queue from a query or form;
// withState, the jobs page's, also the state, the correlation id and the
// metadata pairs (the dead letters' bulk actions select by kind and queue
// only, as their confirmation says).
func parseFilter(q url.Values, withState bool) (twicestore.JobFilter, error) {
	f := twicestore.JobFilter{Kind: strings.TrimSpace(q.Get("kind")), Queue: strings.TrimSpace(q.Get("queue")), Node: strings.TrimSpace(q.Get("node"))}
	switch t := twice.JobTiming(strings.TrimSpace(q.Get("timing"))); t {
	case "", twice.JobDue, twice.JobScheduled:
		f.Timing = t
	default:
		return f, badInputf("timing %q is not %q or %q: say which available jobs to list", t, twice.JobDue, twice.JobScheduled)
	}
	if withState {
		if err := parseSearch(q, &f); err != nil {
			return f, err
		}
	}
	if s := strings.TrimSpace(q.Get("state")); s != "" && withState {
		f.State = twicetype.JobState(s)
		if !f.State.Valid() {
			names := make([]string, len(twicetype.AllJobStates))
			for i, st := range twicetype.AllJobStates {
				names[i] = string(st)
			}
			return f, badInputf("state %q is not a job state: use one of %s", s, strings.Join(names, ", "))
		}
	}
	return f, nil
}

// filterQuery renders a filter's state, kind and queue as query values.
func filterQuery(f twicestore.JobFilter) url.Values {
	q := url.Values{}
	if f.State != "" && f.State != twicetype.JobStateDead {
		q.Set("state", string(f.State))
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if f.Queue != "" {
		q.Set("queue", f.Queue)
	}
	if f.Timing != "" {
		q.Set("timing", string(f.Timing))
	}
	if f.Node != "" {
		q.Set("node", f.Node)
	}
	searchQuery(f, q)
	return q
}

// deadSelection reads which jobs in state (dead, or completed for a
// replay) an action applies to: the ids given, or with all=yes every job
// in state matching kind and queue. It describes the selection for the
// confirmation and the log.
func (h *Handler) deadSelection(r *http.Request, state twicetype.JobState) (twicestore.JobFilter, string, error) {
	f, err := parseFilter(r.PostForm, false)
	if err != nil {
		return f, "", err
	}
	f.State = state
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return f, "", badInputf("id %q is not a job id: give a positive integer", s)
		}
		f.IDs = append(f.IDs, id)
	}
	all := r.PostForm.Get("all") == "yes"
	switch {
	case len(f.IDs) > 0 && all:
		return f, "", badInputf("give either job ids or all=yes, not both")
	case len(f.IDs) == 1:
		return f, fmt.Sprintf("%s job %d", state, f.IDs[0]), nil
	case len(f.IDs) > 1:
		return f, fmt.Sprintf("%d %s jobs", len(f.IDs), state), nil
	case !all:
		return f, "", badInputf("no job selected: give a job id, or all=yes for every %s job matching the filter", state)
	}
	res, err := h.store.JobCount(r.Context(), &twicestore.JobCountParams{Filter: f})
	if err != nil {
		return f, "", err
	}
	n := 0
	for _, c := range res.Counts {
		n += c.Count
	}
	what := fmt.Sprintf("all %d %s jobs", n, state)
	if f.Kind != "" {
		what += " of kind " + f.Kind
	}
	if f.Queue != "" {
		what += " in queue " + f.Queue
	}
	return f, what, nil
}

func (h *Handler) retryDead(r *http.Request, who string) (string, *confirmation, error) {
	return h.bulkDead(r, who, "retry")
}

func (h *Handler) discardDead(r *http.Request, who string) (string, *confirmation, error) {
	return h.bulkDead(r, who, "discard")
}

// bulkDead retries or discards the selected dead jobs once confirmed,
// through the admin API, which acts on each job on its own (a unique-key
// conflict or a job in another state refuses that job only). A retry
// whose form says state=completed replays completed jobs instead, as
// Client.JobRetry does when its filter asks for them.
func (h *Handler) bulkDead(r *http.Request, who, verb string) (string, *confirmation, error) {
	state := twicetype.JobStateDead
	if verb == "retry" && strings.TrimSpace(r.PostForm.Get("state")) == string(twicetype.JobStateCompleted) {
		state = twicetype.JobStateCompleted
	}
	f, what, err := h.deadSelection(r, state)
	if err != nil {
		return "", nil, err
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	detail := "Retried jobs go back to their queue with their attempts reset and their error history kept."
	if verb == "discard" {
		detail = "Discarded jobs are never run again; they are deleted after the discarded-job retention."
	} else if r.PostForm.Get("confirm") != "yes" { // the confirmation page previews; the confirmed post acts
		detail += h.retryPreviewDetail(r, f.IDs, &twice.JobFilter{State: f.State, Kind: f.Kind, Queue: f.Queue})
	}
	if ok, c := confirmed(r, &confirmation{
		Message: fmt.Sprintf("%s %s?", strings.ToUpper(verb[:1])+verb[1:], what),
		Detail:  detail, Button: "Yes, " + verb + " " + what, Cancel: "/dead" + queryOf(filterQuery(f)),
	}); !ok {
		return "", c, nil
	}
	act := h.client.JobRetry
	if verb == "discard" {
		act = h.client.JobDiscard
	}
	p := &twice.JobActionParams{IDs: f.IDs, By: who, Reason: reason}
	if len(f.IDs) == 0 || state == twicetype.JobStateCompleted {
		// In bulk the selection is the dead jobs matching the page's
		// filter; jobs named by id go as they are, so the admin API says
		// why one in another state is refused. A replay asks for
		// completed jobs by its filter, by id too.
		p.Filter = &twice.JobFilter{State: f.State, Kind: f.Kind, Queue: f.Queue}
	}
	res, err := act(r.Context(), p)
	if err != nil {
		return "", nil, err
	}
	ids, refused := res.Changed(), res.Err()
	if len(ids) == 0 {
		if refused != nil {
			return "", nil, &stateConflict{fmt.Errorf("nothing to %s: %w", verb, refused)}
		}
		return "", nil, badInputf("nothing to %s: %s matched no %s job (already retried or discarded?)", verb, what, state)
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", verb+" dead jobs",
		"what", what, "ids", ids, "kind", f.Kind, "queue", f.Queue, "reason", reason, "refused", errString(refused))
	if len(f.IDs) == 1 {
		return "/jobs/" + strconv.FormatInt(f.IDs[0], 10), nil, nil
	}
	return "/dead" + queryOf(filterQuery(f)), nil, nil
}

// errString is err's message, or empty for nil: a log attribute.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func queryOf(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func (h *Handler) setSwitch(r *http.Request, who string) (string, *confirmation, error) {
	kind := strings.TrimSpace(r.PostForm.Get("kind"))
	state := r.PostForm.Get("state")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if kind == "" {
		return "", nil, badInputf("no kind given: say which kind to switch")
	}
	if state != "on" && state != "off" {
		return "", nil, badInputf("state %q is not a switch state: say on or off", state)
	}
	if reason == "" {
		return "", nil, badInputf("a reason is required: say why the switch is flipped, e.g. \"incident 42: smtp down\"")
	}
	rows, cat, err := h.toggleRows(r)
	if err != nil {
		return "", nil, err
	}
	if !cat.Known(kind) {
		msg := fmt.Sprintf("kind %q is in no catalog, not registered here and handled by no live worker, so the switch would switch nothing", kind)
		if u := toggles.Unknown([]string{kind}, cat.Kinds); len(u) == 1 && u[0].Suggestion != "" {
			msg += "; did you mean " + u[0].Suggestion + "?"
		}
		return "", nil, badInputf("%s (use twice toggles set --force for a kind whose workers have never run)", msg)
	}
	enable := state == "on"
	var row switchRow
	for _, rw := range rows {
		if strings.EqualFold(rw.Kind, kind) {
			row = rw
		}
	}
	// A kind in no catalog may be fail-closed: ask, as for one that is.
	if failClosed := cat.FailClosed(kind) || !row.Catalogued; enable && failClosed {
		why := "It is registered fail-closed because its jobs move money or cannot be undone"
		if !row.Catalogued {
			why = "No catalog says whether it is fail-closed (its workers publish none), so it is treated as one"
		}
		if ok, c := confirmed(r, &confirmation{
			Message: fmt.Sprintf("Turn on %s, a fail-closed kind?", kind),
			Detail: fmt.Sprintf("It is %s now. %s: once on, its held jobs start running on every worker within seconds. Reason given: %q.",
				cmp.Or(row.State, "off"), why, reason),
			Button: "Yes, turn " + kind + " on", Cancel: "/switches",
		}); !ok {
			return "", c, nil
		}
	}
	var expires time.Time
	if s := strings.TrimSpace(r.PostForm.Get("for")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return "", nil, badInputf("for=%q is not a positive duration: give one like 30m or 4h, or leave it empty for no expiry", s)
		}
		expires = time.Now().Add(d)
	}
	err = h.client.ToggleSet(r.Context(), &twice.ToggleSetParams{
		Kind: kind, Enabled: enable, Reason: reason, By: who, ExpiresAt: expires, Source: "dashboard",
	})
	if err != nil {
		return "", nil, err
	}
	attrs := []any{"who", who, "action", "set kill switch", "what", kind + " " + ops.OnOff(enable), "reason", reason}
	if !expires.IsZero() {
		attrs = append(attrs, "expires_at", expires)
	}
	h.logger.InfoContext(r.Context(), "dashboard action", attrs...)
	return "/switches", nil, nil
}

func (h *Handler) unsetSwitch(r *http.Request, who string) (string, *confirmation, error) {
	kind := strings.ToLower(strings.TrimSpace(r.PostForm.Get("kind")))
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if kind == "" {
		return "", nil, badInputf("no kind given: say whose stored switch to remove")
	}
	if reason == "" {
		return "", nil, badInputf("a reason is required: say why the stored switch is removed")
	}
	if _, err := h.client.ToggleUnset(r.Context(), &twice.ToggleUnsetParams{Kind: kind, By: who, Reason: reason, Source: "dashboard"}); err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "unset kill switch",
		"what", kind, "reason", reason)
	return "/switches", nil, nil
}
