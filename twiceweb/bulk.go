package twiceweb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// The jobs page's bulk actions: the operator ticks jobs (or every job on
// the page) and picks cancel, retry, run now or delete; a confirmation
// states how many jobs and which, asks for the reason and, for a retry,
// previews what the replay would do; only the confirmed form acts, through
// the client's admin API as the one-job actions do, and the answer says
// what changed and why the rest were skipped. A plain form POST all
// along: the page's script only ticks every box at once.

// bulkSampleMax is how many of the selected ids a confirmation lists.
const bulkSampleMax = 100

// bulkAction is one action of the bulk form.
type bulkAction struct {
	verb   string // as the form names it: "run-now"
	label  string // as a sentence says it: "run now"
	done   string // as a result says it: "made due now"
	detail string // what happens to each job
	do     func(*twice.Client, context.Context, *twice.JobActionParams) (*twice.JobActionResult, error)
}

var bulkActions = []bulkAction{
	{verb: "cancel", label: "cancel", done: "cancelled",
		detail: "Each job waiting to run ends cancelled at once; a running one is told to stop and ends cancelled unless it finishes first. Finished jobs are left as they are.",
		do:     (*twice.Client).JobCancel},
	{verb: "retry", label: "retry", done: "retried",
		detail: "Each dead, discarded or cancelled job goes back to its queue with its attempts reset and its error history kept; jobs in other states are skipped.",
		do:     (*twice.Client).JobRetry},
	{verb: "run-now", label: "run now", done: "made due now",
		detail: "Each scheduled job, or retry waiting out its backoff, becomes due now and runs at the next fetch, its attempts as they are; running, finished and waiting jobs are skipped.",
		do:     (*twice.Client).JobRunNow},
	{verb: "delete", label: "delete", done: "deleted",
		detail: "Each job and its history are deleted: it never runs again and its page is gone. Running jobs are skipped: cancel them first.",
		do:     (*twice.Client).JobDelete},
}

// bulkData is the bulk action's page: its confirmation, or once
// confirmed, its result.
type bulkData struct {
	Action string // the form's action value
	Label  string // "run now"
	IDs    []int64
	Sample []int64 // the ids the page lists
	More   int     // how many it leaves out
	Detail string
	Reason string
	Done   bool // the result: the action was carried out
	// The result: how many jobs changed (CancelRequested of them running
	// jobs asked to stop), and the others with why.
	Changed         int
	CancelRequested int
	Skipped         []skippedJob
	Why             []skipCount
}

func (bulkData) page() string { return "bulk" }

// Question is the confirmation's question: "Cancel 50 jobs?".
func (d bulkData) Question() string {
	return fmt.Sprintf("%s %s?", upperFirst(d.Label), jobCount(len(d.IDs)))
}

// Summary is the result's first line: "Cancelled 48 of 50 jobs.".
func (d bulkData) Summary() string {
	a, _ := findBulkAction(d.Action)
	return fmt.Sprintf("%s %d of %s.", upperFirst(a.done), d.Changed, jobCount(len(d.IDs)))
}

// skippedJob is one selected job the action did not change.
type skippedJob struct {
	ID    int64
	State twicetype.JobState // empty when the job no longer exists
	Why   string
}

// skipCount is how many jobs were skipped for one reason.
type skipCount struct {
	Why   string
	Count int
}

func jobCount(n int) string {
	if n == 1 {
		return "1 job"
	}
	return strconv.Itoa(n) + " jobs"
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func findBulkAction(verb string) (bulkAction, bool) {
	i := slices.IndexFunc(bulkActions, func(a bulkAction) bool { return a.verb == verb })
	if i < 0 {
		return bulkAction{}, false
	}
	return bulkActions[i], true
}

// bulkJobs serves POST /jobs/bulk: the confirmation, then the action.
func (h *Handler) bulkJobs(w http.ResponseWriter, r *http.Request) {
	if !h.actionAllowed(w, r) {
		return
	}
	d, err := h.bulk(r, info(r).who)
	if err != nil {
		h.actionFailed(w, r, err)
		return
	}
	title := "Confirm"
	if d.Done {
		title = "Bulk " + d.Label
	}
	h.render(w, r, "bulk", title, d)
}

// bulk checks the form and returns the confirmation, or, confirmed, acts
// and returns the result. Nothing changes before the confirmation.
func (h *Handler) bulk(r *http.Request, who string) (*bulkData, error) {
	a, ok := findBulkAction(r.PostForm.Get("action"))
	if !ok {
		names := make([]string, len(bulkActions))
		for i, a := range bulkActions {
			names[i] = a.verb
		}
		return nil, badInputf("action %q is not a bulk action: choose one of %s", r.PostForm.Get("action"), strings.Join(names, ", "))
	}
	ids, err := bulkSelection(r.PostForm)
	if err != nil {
		return nil, err
	}
	d := &bulkData{Action: a.verb, Label: a.label, IDs: ids, Detail: a.detail,
		Reason: strings.TrimSpace(r.PostForm.Get("reason"))}
	if r.PostForm.Get("confirm") != "yes" {
		d.Sample = ids[:min(len(ids), bulkSampleMax)]
		d.More = len(ids) - len(d.Sample)
		if a.verb == "retry" {
			d.Detail += h.retryPreviewDetail(r, ids, nil)
		}
		return d, nil
	}
	if d.Reason == "" {
		return nil, badInputf("a reason is required: say why you %s these jobs (it is logged, and recorded where the store keeps one)", a.label)
	}
	res, err := a.do(h.client, r.Context(), &twice.JobActionParams{IDs: ids, By: who, Reason: d.Reason})
	if err != nil {
		return nil, err
	}
	d.Done = true
	d.result(res)
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", a.label+" jobs",
		"what", jobCount(len(ids)), "ids", res.Changed(), "skipped", len(d.Skipped), "reason", d.Reason)
	return d, nil
}

// bulkSelection reads the ids a bulk form names: the ticked ones, and
// with all=page every job the page listed (page_id), so that "all on this
// page" works without the script that ticks the boxes. Ids are deduplicated
// and sorted; none, or more than twice.JobListLimitMax, is refused.
func bulkSelection(form url.Values) ([]int64, error) {
	raw := form["id"]
	if form.Get("all") == "page" {
		raw = append(slices.Clip(raw), form["page_id"]...)
	}
	seen := make(map[int64]bool, len(raw))
	var ids []int64
	for _, s := range raw {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || id <= 0 {
			return nil, badInputf("id %q is not a job id: give a positive integer", s)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	switch {
	case len(ids) == 0:
		return nil, badInputf("no job selected: tick the jobs to act on (the box in the header ticks every job on the page), then choose the action; nothing changed")
	case len(ids) > twice.JobListLimitMax:
		return nil, badInputf("%d jobs selected, more than the %d one action takes: select fewer, or use twice jobs cancel|retry|delete|run-now --all with a filter; nothing changed",
			len(ids), twice.JobListLimitMax)
	}
	slices.Sort(ids)
	return ids, nil
}

// result counts what the action changed, and lists each skipped job with
// why, grouped by reason for the summary.
func (d *bulkData) result(res *twice.JobActionResult) {
	counts := map[string]int{}
	for _, j := range res.Jobs {
		if j.Changed {
			d.Changed++
			if j.CancelRequested {
				d.CancelRequested++
			}
			continue
		}
		why := skipReason(j)
		if counts[why] == 0 {
			d.Why = append(d.Why, skipCount{Why: why})
		}
		counts[why]++
		msg := "nothing to do"
		if j.Err != nil {
			msg = j.Err.Error()
		}
		d.Skipped = append(d.Skipped, skippedJob{ID: j.ID, State: j.State, Why: msg})
	}
	for i := range d.Why {
		d.Why[i].Count = counts[d.Why[i].Why]
	}
}

// skipReason is the short reason a job was skipped, the same for every
// job skipped alike.
func skipReason(j twice.JobResult) string {
	switch {
	case errors.Is(j.Err, twice.ErrJobNotFound):
		return "no longer exists (deleted, or pruned after its retention)"
	case errors.Is(j.Err, twice.ErrUniqueConflict):
		return "its unique key is held by another job"
	case errors.Is(j.Err, twice.ErrRetryUncertain):
		return "its effect may have happened: settle it first (twice jobs retry --dry-run)"
	case j.State == twicetype.JobStateRunning:
		return "is running"
	case j.State != "":
		return "is " + string(j.State)
	}
	return "nothing to do"
}
