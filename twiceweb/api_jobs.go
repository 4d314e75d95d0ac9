package twiceweb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicetype"
)

// The API's job routes: enqueue, read, list, cancel, retry.

// enqueueRequest is the body of POST /api/v1/jobs.
type enqueueRequest struct {
	Kind        string            `json:"kind"`
	Args        json.RawMessage   `json:"args"`
	Queue       string            `json:"queue"`
	RunAt       string            `json:"run_at"`
	Delay       string            `json:"delay"`
	UniqueKey   string            `json:"unique_key"`
	Priority    int               `json:"priority"`
	MaxAttempts int               `json:"max_attempts"`
	Metadata    map[string]string `json:"metadata"`
	// Force enqueues a kind no registry, catalog or live worker knows
	// (twice.EnqueueOpts.AllowUnknownKind, the CLI's enqueue --force).
	Force bool `json:"force"`
}

// enqueueResponse is what POST /api/v1/jobs answers.
type enqueueResponse struct {
	ID        int64     `json:"id"`
	State     string    `json:"state"`
	Kind      string    `json:"kind"`
	Queue     string    `json:"queue"`
	RunAt     time.Time `json:"run_at"`
	Duplicate bool      `json:"duplicate"`
}

// location is the job's URL below the mount point.
func (e enqueueResponse) location() string { return apiPrefix + "jobs/" + strconv.FormatInt(e.ID, 10) }

// enqueue stores one job through Client.EnqueueJSON, which checks the
// kind and its args as the CLI's enqueue does. It answers 201 for a new
// job and 200 for a duplicate of an unfinished one (its unique key
// matched): a duplicate is a result, not an error. "delay" is
// EnqueueOpts.Delay and "force" EnqueueOpts.AllowUnknownKind, as the
// CLI's enqueue --delay and --force.
func (a *api) enqueue(r *http.Request, c *caller) (int, any, error) {
	var req enqueueRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	opts := &twice.EnqueueOpts{Queue: req.Queue, UniqueKey: req.UniqueKey, Priority: req.Priority, MaxAttempts: req.MaxAttempts,
		AllowUnknownKind: req.Force}
	switch {
	case req.Kind == "":
		return 0, nil, badRequest(`the body has no "kind": name the job kind, e.g. {"kind": "email.welcome.v1", "args": {"user_id": 42}}`)
	case req.MaxAttempts < 0:
		return 0, nil, badRequest(fmt.Sprintf(`"max_attempts" is %d: give a positive number, or leave it out for the kind's default`, req.MaxAttempts))
	}
	if req.RunAt != "" {
		t, err := parseAPITime("run_at", req.RunAt)
		if err != nil {
			return 0, nil, err
		}
		opts.RunAt = t
	}
	if req.Delay != "" {
		d, err := parseAPIDelay(req.Delay, req.RunAt != "")
		if err != nil {
			return 0, nil, err
		}
		opts.Delay = d
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return 0, nil, err
	}
	opts.Metadata = req.Metadata
	args := []byte(req.Args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if err := checkJSONText(args); err != nil {
		return 0, nil, err
	}
	res, err := a.h.client.EnqueueJSON(r.Context(), req.Kind, args, opts)
	if errors.Is(err, twice.ErrUnknownKind) {
		p := problemFor(err)
		p.Detail += `; send "force": true to enqueue it anyway, for a kind whose workers have never run`
		return 0, nil, p
	}
	if err != nil {
		return 0, nil, err
	}
	j := res.Job
	a.h.logger.InfoContext(r.Context(), "api: job enqueued", "who", c.name, logattr.JobID, j.ID, logattr.Kind, j.Kind, logattr.Queue, j.Queue, "duplicate", res.Duplicate)
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	return status, enqueueResponse{ID: j.ID, State: string(j.State), Kind: j.Kind, Queue: j.Queue, RunAt: j.RunAt.UTC(), Duplicate: res.Duplicate}, nil
}

// parseAPIDelay parses an enqueue's "delay", a Go duration ("30s",
// "1h30m"): not negative, and not with "run_at", as the two say the
// same thing.
func parseAPIDelay(s string, withRunAt bool) (time.Duration, error) {
	if withRunAt {
		return 0, badRequest(`"delay" and "run_at" exclude each other: give one`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badRequest(fmt.Sprintf(`"delay" is %s, not a duration: give one like "30s" or "1h30m"`, strconv.QuoteToASCII(s)))
	}
	if d < 0 {
		return 0, badRequest(fmt.Sprintf(`"delay" is %s, which is negative: give a positive duration, or leave it out to run now`, strconv.QuoteToASCII(s)))
	}
	return d, nil
}

// checkMetadata refuses metadata the API does not take: too many entries,
// a key or value that is not text or too long. The library checks the
// text again; the caps are the API's, since a caller, not the
// application's own hook, sent it.
func checkMetadata(md map[string]string) error {
	if len(md) > apiMaxMetadata {
		return badRequest(fmt.Sprintf(`"metadata" has %d entries, over %d: send fewer`, len(md), apiMaxMetadata))
	}
	for k, v := range md {
		if err := freetext.Check("metadata key", k, twice.MaxKeyBytes); err != nil {
			return badRequest(err.Error())
		}
		if k == "" {
			return badRequest(`"metadata" has an empty key: name every entry`)
		}
		if err := freetext.Check("metadata "+strconv.QuoteToASCII(k), v, apiMaxMetadataValue); err != nil {
			return badRequest(err.Error())
		}
	}
	return nil
}

// checkJSONText refuses args holding "\u0000" in a key or string: valid
// JSON that PostgreSQL's jsonb cannot hold (SQLite would store it), so
// both drivers refuse it alike, before the database.
func checkJSONText(raw []byte) error {
	if !bytes.Contains(raw, []byte(`\u0000`)) {
		return nil // the cheap path: no escape, no NUL (raw NULs are invalid JSON)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // EOF, or a syntax error EnqueueJSON will name
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return &problem{Type: "invalid-args", Title: "Invalid job args", Status: http.StatusUnprocessableEntity,
				Detail: fmt.Sprintf(`"args" contains a NUL character (\u0000) in %s: remove it (job args are text)`, strconv.QuoteToASCII(s))}
		}
	}
}

// apiJob is a job as the API shows it: args redacted as the dashboard
// shows them, or hidden for a kind in no catalog.
type apiJob struct {
	ID            int64             `json:"id"`
	Kind          string            `json:"kind"`
	Queue         string            `json:"queue"`
	State         string            `json:"state"`
	Priority      int               `json:"priority"`
	Args          json.RawMessage   `json:"args"`
	ArgsHidden    bool              `json:"args_hidden,omitempty"`
	Redacted      []string          `json:"redacted,omitempty"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts"`
	RunAt         time.Time         `json:"run_at"`
	CreatedAt     time.Time         `json:"created_at"`
	FinishedAt    *time.Time        `json:"finished_at,omitempty"`
	UniqueKey     string            `json:"unique_key,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Note          string            `json:"note,omitempty"`
	Errors        []apiAttemptError `json:"errors,omitempty"`
	Cancel        *apiCancelRequest `json:"cancel,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	AttemptedBy   string            `json:"attempted_by,omitempty"`
	// WaitingBecause says why a job that neither runs nor has finished
	// is not running.
	WaitingBecause *twice.WaitReason `json:"waiting_because,omitempty"`
}

type apiAttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

type apiCancelRequest struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// jobJSON shows j with its args redacted by the catalog kc.
func jobJSON(j *twicetype.JobRow, kc *kindCatalog) apiJob {
	out := apiJob{ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: string(j.State), Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, RunAt: j.RunAt.UTC(), CreatedAt: j.CreatedAt.UTC(),
		UniqueKey: j.UniqueKey, CorrelationID: j.CorrelationID, Note: j.Note, Metadata: j.Metadata, AttemptedBy: j.AttemptedBy}
	if fields, catalogued := kc.sensitive(j.Kind); catalogued {
		out.Args, out.Redacted = ops.Redact(j.Args, fields)
		if !json.Valid(out.Args) {
			out.Args, out.ArgsHidden = nil, true
		}
	} else {
		out.ArgsHidden = true // no field can be recognised as sensitive
	}
	if !j.FinishedAt.IsZero() {
		t := j.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	for _, e := range j.Errors {
		out.Errors = append(out.Errors, apiAttemptError{Attempt: e.Attempt, At: e.At.UTC(), Error: e.Error})
	}
	if cr := j.Cancel; cr != nil {
		out.Cancel = &apiCancelRequest{At: cr.At.UTC(), By: cr.By, Reason: cr.Reason}
	}
	return out
}

// getJob answers one job.
func (a *api) getJob(r *http.Request, _ *caller) (int, any, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, nil, err
	}
	d, err := a.h.client.JobDetail(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	kc, err := a.h.catalog(r.Context())
	if err != nil {
		return 0, nil, err
	}
	why, err := a.h.waitReasons(r.Context(), []*twicetype.JobRow{d.Job})
	if err != nil {
		return 0, nil, err
	}
	out := jobDetailJSON(d, kc)
	out.WaitingBecause = why[d.Job.ID]
	return http.StatusOK, out, nil
}

// jobListResponse is one page of GET /api/v1/jobs.
type jobListResponse struct {
	Jobs []apiJob `json:"jobs"`
	// Next is the "after" of the next page; absent on the last.
	Next int64 `json:"next,omitempty"`
}

// listParams are the query parameters of GET /api/v1/jobs: the CLI's
// filters of 'twice jobs ls'.
var listParams = []string{"state", "kind", "queue", "node", "timing", "correlation_id", "meta", "limit", "after"}

// listJobs answers a page of jobs, newest first.
func (a *api) listJobs(r *http.Request, _ *caller) (int, any, error) {
	q := r.URL.Query()
	for name, vs := range q {
		if !slices.Contains(listParams, name) {
			return 0, nil, badRequest(fmt.Sprintf("unknown query parameter %s: use %s", strconv.QuoteToASCII(name), strings.Join(listParams, ", ")))
		}
		if len(vs) > 1 && name != "meta" { // meta=key=value pairs repeat
			return 0, nil, badRequest(fmt.Sprintf("query parameter %q is given %d times: give it once", name, len(vs)))
		}
	}
	md, err := twice.ParseMetadataPairs(q["meta"])
	if err != nil {
		return 0, nil, badRequest("query parameter meta: " + err.Error())
	}
	p := &twice.JobListParams{JobFilter: twice.JobFilter{
		State: twicetype.JobState(q.Get("state")), Kind: q.Get("kind"), Queue: q.Get("queue"),
		Node: q.Get("node"), Timing: twice.JobTiming(q.Get("timing")), CorrelationID: q.Get("correlation_id"), Metadata: md,
	}}
	for _, n := range []struct {
		name string
		dst  *int64
	}{{"limit", nil}, {"after", &p.BeforeID}} {
		s := q.Get(n.name)
		if s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, nil, badRequest(fmt.Sprintf("query parameter %q is %s: give a non-negative integer", n.name, strconv.QuoteToASCII(s)))
		}
		if n.dst != nil {
			*n.dst = v
		} else {
			p.Limit = int(min(v, twice.JobListLimitMax))
		}
	}
	res, err := a.h.client.JobList(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	kc, err := a.h.catalog(r.Context())
	if err != nil {
		return 0, nil, err
	}
	why, err := a.h.waitReasons(r.Context(), res.Jobs)
	if err != nil {
		return 0, nil, err
	}
	out := jobListResponse{Jobs: make([]apiJob, 0, len(res.Jobs)), Next: res.Next}
	for _, j := range res.Jobs {
		job := jobJSON(j, kc)
		job.WaitingBecause = why[j.ID]
		out.Jobs = append(out.Jobs, job)
	}
	return http.StatusOK, out, nil
}

// reasonRequest is the optional body of an action: why it is taken.
type reasonRequest struct {
	Reason string `json:"reason"`
}

// jobActionResponse is what a cancel or retry did to its job.
type jobActionResponse struct {
	ID              int64  `json:"id"`
	State           string `json:"state"`
	Changed         bool   `json:"changed"`
	CancelRequested bool   `json:"cancel_requested,omitempty"`
}

func (a *api) cancelJob(r *http.Request, c *caller) (int, any, error) {
	return a.jobAction(r, c, a.h.client.JobCancel)
}

func (a *api) retryJob(r *http.Request, c *caller) (int, any, error) {
	return a.jobAction(r, c, a.h.client.JobRetry)
}

// jobAction runs a cancel or retry of the path's job, by the caller with
// the body's reason. A job the action refused answers its error: 404
// for no such job, 409 for its state.
func (a *api) jobAction(r *http.Request, c *caller, act func(context.Context, *twice.JobActionParams) (*twice.JobActionResult, error)) (int, any, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, nil, err
	}
	var req reasonRequest
	if err := decodeBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	res, err := act(r.Context(), &twice.JobActionParams{IDs: []int64{id}, By: c.name, Reason: req.Reason})
	if err != nil {
		return 0, nil, err
	}
	if len(res.Jobs) != 1 {
		return 0, nil, fmt.Errorf("job %d: the action answered %d results", id, len(res.Jobs))
	}
	j := res.Jobs[0]
	if j.Err != nil {
		return 0, nil, j.Err
	}
	return http.StatusOK, jobActionResponse{ID: j.ID, State: string(j.State), Changed: j.Changed, CancelRequested: j.CancelRequested}, nil
}
