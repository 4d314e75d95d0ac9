package twiceweb

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
)

// The API's operator routes: queues, kill switches, the kind catalog.

// pauseRequest is the optional body of a queue pause.
type pauseRequest struct {
	// Until ends the pause by itself (RFC 3339); empty pauses until a
	// resume.
	Until  string `json:"until"`
	Reason string `json:"reason"`
}

// queueResponse is a queue after a pause or resume.
type queueResponse struct {
	Queue  string     `json:"queue"`
	Paused bool       `json:"paused"`
	Until  *time.Time `json:"until,omitempty"`
	// Resumed is false when the queue was not paused: nothing changed.
	Resumed *bool `json:"resumed,omitempty"`
}

func (a *api) pauseQueue(r *http.Request, c *caller) (int, any, error) {
	var req pauseRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	p := &twice.QueuePauseParams{Queue: r.PathValue("queue"), By: c.name, Reason: req.Reason}
	if req.Until != "" {
		t, err := parseAPITime("until", req.Until)
		if err != nil {
			return 0, nil, err
		}
		p.Until = t
	}
	if err := a.h.client.QueuePause(r.Context(), p); err != nil {
		return 0, nil, queueError(err)
	}
	out := queueResponse{Queue: p.Queue, Paused: true}
	if !p.Until.IsZero() {
		u := p.Until.UTC()
		out.Until = &u
	}
	return http.StatusOK, out, nil
}

func (a *api) resumeQueue(r *http.Request, c *caller) (int, any, error) {
	var req reasonRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	q := r.PathValue("queue")
	res, err := a.h.client.QueueResume(r.Context(), &twice.QueueResumeParams{Queue: q, By: c.name, Reason: req.Reason})
	if err != nil {
		return 0, nil, queueError(err)
	}
	return http.StatusOK, queueResponse{Queue: q, Resumed: &res.Resumed}, nil
}

// queueError makes an unknown queue, which the path names, a 404.
func queueError(err error) error {
	if errors.Is(err, twice.ErrUnknownQueue) {
		return &notFound{err: err}
	}
	return err
}

// switchRequest is the body of PUT /api/v1/switches/{kind}.
type switchRequest struct {
	// Enabled is required: a switch is on or off, never a default.
	Enabled *bool  `json:"enabled"`
	Reason  string `json:"reason"`
	// ExpiresAt (RFC 3339) ends the switch by itself.
	ExpiresAt string `json:"expires_at"`
	// Force stores a switch for a kind nothing knows yet.
	Force bool `json:"force"`
}

// switchResponse is a kill switch as stored, or as it was when removed.
type switchResponse struct {
	Kind      string     `json:"kind"`
	Enabled   bool       `json:"enabled"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Removed   bool       `json:"removed,omitempty"`
}

// switchSource is recorded in the switch history for the API's changes.
const switchSource = "api"

func (a *api) setSwitch(r *http.Request, c *caller) (int, any, error) {
	var req switchRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if req.Enabled == nil {
		return 0, nil, badRequest(`the body has no "enabled": send {"enabled": false} to switch the kind off, or true to switch it on`)
	}
	p := &twice.ToggleSetParams{Kind: r.PathValue("kind"), Enabled: *req.Enabled, By: c.name, Reason: req.Reason,
		Force: req.Force, Source: switchSource}
	if req.ExpiresAt != "" {
		t, err := parseAPITime("expires_at", req.ExpiresAt)
		if err != nil {
			return 0, nil, err
		}
		p.ExpiresAt = t
	}
	if err := a.h.client.ToggleSet(r.Context(), p); err != nil {
		if errors.Is(err, twice.ErrUnknownKind) {
			return 0, nil, &notFound{err: fmt.Errorf("%w (send \"force\": true to store it anyway)", err)}
		}
		return 0, nil, err
	}
	out := switchResponse{Kind: strings.ToLower(strings.TrimSpace(p.Kind)), Enabled: p.Enabled}
	if !p.ExpiresAt.IsZero() {
		t := p.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return http.StatusOK, out, nil
}

func (a *api) unsetSwitch(r *http.Request, c *caller) (int, any, error) {
	var req reasonRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	kind := r.PathValue("kind")
	// A kind with no stored switch is the path's missing resource: 404.
	// ToggleUnset refuses it too, as input; this read only picks the code.
	stored, err := a.h.client.ToggleList(r.Context())
	if err != nil {
		return 0, nil, err
	}
	found := false
	for _, t := range stored {
		found = found || strings.EqualFold(t.Kind, strings.TrimSpace(kind))
	}
	if !found {
		return 0, nil, &problem{Type: "switch-not-found", Title: "Kill switch not found", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no stored kill switch for %s: nothing to unset (GET the switches page or 'twice toggles ls' lists them)", strconv.QuoteToASCII(kind))}
	}
	old, err := a.h.client.ToggleUnset(r.Context(), &twice.ToggleUnsetParams{Kind: kind, By: c.name, Reason: req.Reason, Source: switchSource})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, switchResponse{Kind: old.Kind, Enabled: old.Enabled, Removed: true}, nil
}

// apiKind is one kind of the catalog as the API shows it: no values, so
// nothing to redact, but the sensitive fields named so a client redacts
// them too.
type apiKind struct {
	Kind            string        `json:"kind"`
	Queue           string        `json:"queue"`
	Strategy        string        `json:"strategy,omitempty"`
	FailClosed      bool          `json:"fail_closed"`
	MaxAttempts     int           `json:"max_attempts,omitempty"`
	Args            []apiArgField `json:"args"`
	SensitiveFields []string      `json:"sensitive_fields"`
	Registered      bool          `json:"registered"`
	Live            bool          `json:"live"`
	LastSeen        *time.Time    `json:"last_seen,omitempty"`
}

type apiArgField struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Sensitive bool   `json:"sensitive,omitempty"`
}

// kinds answers the kind catalog (Client.Catalog).
func (a *api) kinds(r *http.Request, _ *caller) (int, any, error) {
	list, err := a.h.client.Catalog(r.Context())
	if err != nil {
		return 0, nil, err
	}
	out := struct {
		Kinds []apiKind `json:"kinds"`
	}{Kinds: make([]apiKind, 0, len(list))}
	for _, k := range list {
		ak := apiKind{Kind: k.Kind, Queue: k.Queue, Strategy: k.Strategy, FailClosed: k.FailClosed, MaxAttempts: k.MaxAttempts,
			Args: make([]apiArgField, 0, len(k.Args)), SensitiveFields: k.SensitiveFields(), Registered: k.Registered, Live: k.Live}
		if ak.SensitiveFields == nil {
			ak.SensitiveFields = []string{}
		}
		for _, f := range k.Args {
			ak.Args = append(ak.Args, apiArgField{Name: f.Name, Type: f.Type, Sensitive: f.Sensitive})
		}
		if !k.LastSeen.IsZero() {
			t := k.LastSeen.UTC()
			ak.LastSeen = &t
		}
		out.Kinds = append(out.Kinds, ak)
	}
	return http.StatusOK, out, nil
}

// parseAPITime parses an RFC 3339 time of the body's field name.
func parseAPITime(name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badRequest(fmt.Sprintf(`%q %s is not an RFC 3339 time: write it like "2026-12-01T06:00:00Z"`, name, strconv.QuoteToASCII(s)))
	}
	return t, nil
}
