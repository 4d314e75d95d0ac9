package twiceweb

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// workflowsData is the workflow list page: one page of pageSize
// workflows, newest first, paged by id as the job lists are.
type workflowsData struct {
	Workflows []*twicetype.Workflow
	Before    int64 // the page continues below this id; 0 is the newest
	Next      int64 // the id to continue from; 0 when this is the last page
}

func (workflowsData) page() string { return "workflows" }

// Query renders a page start as a query string.
func (workflowsData) Query(before int64) string {
	if before <= 0 {
		return ""
	}
	return "?before=" + strconv.FormatInt(before, 10)
}

func (h *Handler) workflows(r *http.Request) (string, any, error) {
	var d workflowsData
	if s := r.URL.Query().Get("before"); s != "" {
		var err error
		if d.Before, err = strconv.ParseInt(s, 10, 64); err != nil || d.Before <= 0 {
			return "", nil, badInputf("before=%q is not a workflow id: give a positive integer", s)
		}
	}
	// One more than a page tells whether an older page follows.
	list, err := h.client.WorkflowList(r.Context(), &twice.WorkflowListOpts{Before: d.Before, Limit: pageSize + 1})
	if err != nil {
		return "", nil, err
	}
	if len(list) > pageSize {
		list = list[:pageSize]
		d.Next = list[pageSize-1].ID
	}
	d.Workflows = list
	return "Workflows", d, nil
}

// workflowData is one workflow's graph: its tasks by level (a task's level
// is one more than its deepest dependency's), so the page reads from the
// roots down to the last task.
type workflowData struct {
	Workflow *twicetype.Workflow
	// Counts tell cancelled tasks from dead ones (Workflow.Dead holds both).
	Counts twice.WorkflowCounts
	Levels [][]workflowTaskRow
}

func (workflowData) page() string { return "workflow" }

// workflowTaskRow is one task with the state to show: its job's once
// enqueued, else waiting (with how many dependencies) or cancelled.
type workflowTaskRow struct {
	*twicetype.WorkflowTask
	State string
	// Why says why the task waits: for its dependencies, or as its job.
	Why *twice.WaitReason
}

func (h *Handler) workflow(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", nil, badInputf("%q is not a workflow id: give a positive integer", r.PathValue("id"))
	}
	info, err := h.client.WorkflowGet(r.Context(), id)
	if err != nil {
		return "", nil, err
	}
	byName := map[string]*twicetype.WorkflowTask{}
	for _, t := range info.Tasks {
		byName[t.Name] = t
	}
	level := map[string]int{}
	var depth func(t *twicetype.WorkflowTask) int
	depth = func(t *twicetype.WorkflowTask) int {
		if l, ok := level[t.Name]; ok {
			return l
		}
		level[t.Name] = 0 // a stored graph has no cycle; this only guards the recursion
		l := 0
		for _, d := range t.Deps {
			if dt := byName[d]; dt != nil {
				l = max(l, depth(dt)+1)
			}
		}
		level[t.Name] = l
		return l
	}
	d := workflowData{Workflow: info.Workflow, Counts: info.Counts()}
	why, err := h.client.WorkflowWaitReasons(r.Context(), info)
	if err != nil {
		return "", nil, err
	}
	for _, t := range info.Tasks {
		l := depth(t)
		for len(d.Levels) <= l {
			d.Levels = append(d.Levels, nil)
		}
		row := workflowTaskRow{WorkflowTask: t, State: string(t.State), Why: why[t.Name]}
		switch {
		case t.Job != nil:
			row.State = string(t.Job.State)
		case t.State == twicetype.WorkflowTaskWaiting:
			row.State = "pending" // for its dependencies; a parked job is "waiting"
		}
		d.Levels[l] = append(d.Levels[l], row)
	}
	return "Workflow " + info.Workflow.Name, d, nil
}

// cancelWorkflow cancels a workflow once confirmed: its tasks that have not
// started are cancelled, and its unfinished jobs as JobCancel cancels them
// (a running one is asked to stop).
func (h *Handler) cancelWorkflow(r *http.Request, who string) (string, *confirmation, error) {
	s := strings.TrimSpace(r.PostForm.Get("id"))
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return "", nil, badInputf("id %q is not a workflow id: give a positive integer", s)
	}
	reason, err := formReason(r, "cancel the workflow")
	if err != nil {
		return "", nil, err
	}
	page := "/workflows/" + strconv.FormatInt(id, 10)
	if ok, c := confirmed(r, &confirmation{
		Message: fmt.Sprintf("Cancel workflow %d?", id),
		Detail: "Its tasks that have not started are cancelled and never run; its unfinished jobs are cancelled " +
			"(a running one is asked to stop, and ends cancelled unless it finishes first). " + fmt.Sprintf("Reason given: %q.", reason),
		Button: fmt.Sprintf("Yes, cancel workflow %d", id), Cancel: page,
	}); !ok {
		return "", c, nil
	}
	res, err := h.client.WorkflowCancel(r.Context(), id, who, reason)
	if err != nil {
		return "", nil, err
	}
	h.logger.InfoContext(r.Context(), "dashboard action", "who", who, "action", "cancel workflow",
		"what", fmt.Sprintf("workflow %d (%d tasks not started)", id, res.Tasks), "reason", reason)
	return page, nil, nil
}
