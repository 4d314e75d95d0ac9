package twiceweb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// The actions of the operator plane beyond dead letters and switches: a
// job's cancel and delete, a queue's pause and resume, a schedule's
// removal and trigger. Each goes through the client's admin API, needs a
// reason, and is logged with who and why.

// formReason returns the form's reason, or a 400 saying why it is needed.
func formReason(r *http.Request, why string) (string, error) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		return "", badInputf("a reason is required: say why you %s (it is logged, and recorded where the store keeps one)", why)
	}
	return reason, nil
}

// formJobID returns the form's one job id.
func formJobID(r *http.Request) (int64, error) {
	s := strings.TrimSpace(r.PostForm.Get("id"))
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badInputf("id %q is not a job id: give a positive integer", s)
	}
	return id, nil
}

func (h *Handler) cancelJob(r *http.Request, who string) (string, *confirmation, error) {
	return h.jobAction(r, who, "cancel", h.client.JobCancel,
		"A job waiting to run ends cancelled at once. A running job's handler is told to stop (at once on PostgreSQL, within about half a second otherwise) and the job ends cancelled, never retried, unless it finishes first.")
}

// signalJob sends a waiting job the signal it waits for, with a
// twice.Decision: approved or rejected, by whom and why.
func (h *Handler) signalJob(r *http.Request, who string) (string, *confirmation, error) {
	id, err := formJobID(r)
	if err != nil {
		return "", nil, err
	}
	name := r.PostForm.Get("name")
	var approved bool
	switch d := r.PostForm.Get("decision"); d {
	case "approve":
		approved = true
	case "reject":
	default:
		return "", nil, badInputf("decision %q is neither approve nor reject", d)
	}
	verb := map[bool]string{true: "approve", false: "reject"}[approved]
	reason, err := formReason(r, verb+" the job")
	if err != nil {
		return "", nil, err
	}
	page := "/jobs/" + strconv.FormatInt(id, 10)
	if ok, c := confirmed(r, &confirmation{
		Message: fmt.Sprintf("%s job %d?", strings.ToUpper(verb[:1])+verb[1:], id),
		Detail: fmt.Sprintf("The job gets the signal %q with {approved: %v, by: %q, reason: %q} and runs again. "+
			"A wait takes one signal: if another came first, this one changes nothing.", name, approved, who, reason),
		Button: fmt.Sprintf("Yes, %s job %d", verb, id), Cancel: page,
	}); !ok {
		return "", c, nil
	}
	res, err := h.client.Signal(r.Context(), &twice.SignalParams{JobID: id, Name: name, By: who,
		Payload: twice.Decision{Approved: approved, By: who, Reason: reason}})
	switch {
	case errors.Is(err, twice.ErrJobFinished):
		return "", nil, &stateConflict{err}
	case err != nil:
		return "", nil, err
	case res.Duplicate:
		return "", nil, &stateConflict{fmt.Errorf("job %d already has its signal %q (sent by %s at %s): nothing changed",
			id, name, res.Existing.Sender, res.Existing.At.UTC().Format(time.RFC3339))}
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", verb+" job", "what", fmt.Sprintf("job %d signal %q", id, name), "reason", reason)
	return page, nil, nil
}

// runJobNow makes a scheduled job, or a retry waiting out its backoff, due
// now, once confirmed.
func (h *Handler) runJobNow(r *http.Request, who string) (string, *confirmation, error) {
	return h.jobAction(r, who, "run now", h.client.JobRunNow,
		"The job becomes due now and runs at the next fetch, its attempts as they are.")
}

func (h *Handler) deleteJob(r *http.Request, who string) (string, *confirmation, error) {
	return h.jobAction(r, who, "delete", h.client.JobDelete,
		"The job and its history are deleted: it never runs again and its page is gone. A running job cannot be deleted: cancel it first.")
}

func (h *Handler) retryJob(r *http.Request, who string) (string, *confirmation, error) {
	return h.jobAction(r, who, "retry", h.client.JobRetry,
		"The job goes back to its queue with its attempts reset and its error history kept.")
}

// jobAction cancels, deletes or retries one job once confirmed.
func (h *Handler) jobAction(r *http.Request, who, verb string,
	do func(ctx context.Context, p *twice.JobActionParams) (*twice.JobActionResult, error), detail string) (string, *confirmation, error) {
	id, err := formJobID(r)
	if err != nil {
		return "", nil, err
	}
	reason, err := formReason(r, verb+" the job")
	if err != nil {
		return "", nil, err
	}
	page := "/jobs/" + strconv.FormatInt(id, 10)
	if ok, c := confirmed(r, &confirmation{
		Message: fmt.Sprintf("%s job %d?", strings.ToUpper(verb[:1])+verb[1:], id),
		Detail:  detail + fmt.Sprintf(" Reason given: %q.", reason),
		Button:  fmt.Sprintf("Yes, %s job %d", verb, id), Cancel: page,
	}); !ok {
		return "", c, nil
	}
	res, err := do(r.Context(), &twice.JobActionParams{IDs: []int64{id}, By: who, Reason: reason})
	if err != nil {
		return "", nil, err
	}
	if len(res.Jobs) != 1 || !res.Jobs[0].Changed {
		err := res.Err()
		if err == nil {
			err = fmt.Errorf("job %d: nothing to %s", id, verb)
		}
		if errors.Is(err, twice.ErrJobNotFound) {
			return "", nil, err
		}
		return "", nil, &stateConflict{err}
	}
	what := fmt.Sprintf("job %d", id)
	if res.Jobs[0].CancelRequested {
		what += " (running: cancel requested)"
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", verb+" job", "what", what, "reason", reason)
	if verb == "delete" {
		return "/jobs", nil, nil
	}
	return page, nil, nil
}

// parseUntil reads when a pause ends: empty for never, a duration from
// now ("30m", "4h"), or a UTC time as a datetime-local input sends it
// ("2026-12-01T08:00") or in RFC 3339.
func parseUntil(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, badInputf("until=%q is not in the future: give a positive duration such as 30m", s)
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			if !t.After(now) {
				return time.Time{}, badInputf("until %s is not in the future: give a later time, or none to pause until resumed", t.UTC().Format(time.RFC3339))
			}
			return t, nil
		}
	}
	return time.Time{}, badInputf("until=%q is neither a duration (30m, 4h) nor a UTC time (2026-12-01T08:00): give one, or none to pause until resumed", s)
}

func (h *Handler) pauseQueue(r *http.Request, who string) (string, *confirmation, error) {
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	if queue == "" {
		return "", nil, badInputf("no queue given: say which queue to pause")
	}
	reason, err := formReason(r, "pause the queue")
	if err != nil {
		return "", nil, err
	}
	until, err := parseUntil(r.PostForm.Get("until"), time.Now())
	if err != nil {
		return "", nil, err
	}
	if err := h.client.QueuePause(r.Context(), &twice.QueuePauseParams{Queue: queue, Until: until, By: who, Reason: reason}); err != nil {
		return "", nil, err
	}
	attrs := []any{"who", who, "action", "pause queue", "what", queue, "reason", reason}
	if !until.IsZero() {
		attrs = append(attrs, "until", until)
	}
	h.logger.InfoContext(r.Context(), "dashboard action", attrs...)
	return "/queues", nil, nil
}

func (h *Handler) resumeQueue(r *http.Request, who string) (string, *confirmation, error) {
	queue := strings.TrimSpace(r.PostForm.Get("queue"))
	if queue == "" {
		return "", nil, badInputf("no queue given: say which queue to resume")
	}
	reason, err := formReason(r, "resume the queue")
	if err != nil {
		return "", nil, err
	}
	res, err := h.client.QueueResume(r.Context(), &twice.QueueResumeParams{Queue: queue, By: who, Reason: reason})
	if err != nil {
		return "", nil, err
	}
	if !res.Resumed {
		return "", nil, &stateConflict{fmt.Errorf("queue %q is not paused (or its pause has run out): nothing to resume", queue)}
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "resume queue", "what", queue, "reason", reason)
	return "/queues", nil, nil
}

func (h *Handler) removeSchedule(r *http.Request, who string) (string, *confirmation, error) {
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if name == "" {
		return "", nil, badInputf("no schedule given: say which schedule to remove")
	}
	reason, err := formReason(r, "remove the schedule")
	if err != nil {
		return "", nil, err
	}
	if ok, c := confirmed(r, &confirmation{
		Message: fmt.Sprintf("Remove schedule %s?", name),
		Detail: "Its record and recent ticks are deleted from the store. Do it for a schedule removed from the code: " +
			"a worker that still defines it records it again at its next tick. Jobs it enqueued are kept.",
		Button: "Yes, remove " + name, Cancel: "/recurring",
	}); !ok {
		return "", c, nil
	}
	if err := h.client.ScheduleRemove(r.Context(), &twice.ScheduleRemoveParams{Name: name, By: who, Reason: reason}); err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "remove schedule", "what", name, "reason", reason)
	return "/recurring", nil, nil
}

func (h *Handler) triggerSchedule(r *http.Request, who string) (string, *confirmation, error) {
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if name == "" {
		return "", nil, badInputf("no schedule given: say which schedule to run now")
	}
	reason, err := formReason(r, "run the schedule now")
	if err != nil {
		return "", nil, err
	}
	// The form's request id makes a resubmitted form (a reload, a double
	// click) enqueue one job, not two.
	res, err := h.client.ScheduleTrigger(r.Context(), &twice.ScheduleTriggerParams{
		Name: name, RequestID: strings.TrimSpace(r.PostForm.Get("request")), By: who, Reason: reason,
	})
	if err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "trigger schedule", "what", name,
		"job_id", res.Job.ID, "duplicate", res.Duplicate, "reason", reason)
	return "/jobs/" + strconv.FormatInt(res.Job.ID, 10), nil, nil
}

// retryPreviewDetail is the confirmation's preview of a bulk retry: how
// many of the selected jobs a replay absorbs (their marker exists), really
// runs, skips because their effect may have happened, or leaves because
// another job holds their unique key, and, for completed jobs, how many
// it refuses as workflow tasks or batch members. An operator sees which
// charges or emails could repeat before saying yes. A preview that fails
// says so and leaves the confirmation as it was: the retry still reports
// each job.
func (h *Handler) retryPreviewDetail(r *http.Request, ids []int64, filter *twice.JobFilter) string {
	p := &twice.JobActionParams{IDs: ids}
	if len(ids) == 0 || (filter != nil && filter.State == twicetype.JobStateCompleted) {
		p.Filter = filter
	}
	pv, err := h.client.JobRetryPreview(r.Context(), p)
	if err != nil {
		return " (No preview of what the retry would do: " + err.Error() + ".)"
	}
	detail := fmt.Sprintf(" Preview: %d no-op (the marker exists: no effect is repeated), %d will run (the effect happens again), "+
		"%d uncertain (the effect may have happened: skipped; settle them first, or use twice jobs retry --force --reason), "+
		"%d blocked (another job holds the unique key).",
		pv.Counts[twice.ReplayNoop], pv.Counts[twice.ReplayWillRun], pv.Counts[twice.ReplayUncertain], pv.Counts[twice.ReplayBlocked])
	if n := pv.Counts[twice.ReplayRefused]; n > 0 {
		detail += fmt.Sprintf(" %d refused (completed workflow tasks or batch members: their completion fired its edges; enqueue their work anew).", n)
	}
	return detail
}
