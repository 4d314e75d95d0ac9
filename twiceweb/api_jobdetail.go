package twiceweb

import (
	"encoding/json"
	"time"

	"github.com/twicejobs/twice"
)

// apiJobDetail is GET /api/v1/jobs/{id}: the job, and what it produced
// and belongs to.
type apiJobDetail struct {
	apiJob
	// Output is what the handler recorded with RecordOutput; absent when
	// it recorded nothing or the job did not complete.
	Output       json.RawMessage  `json:"output,omitempty"`
	Handler      string           `json:"handler"`
	Steps        []apiStep        `json:"steps"`
	StepsMore    bool             `json:"steps_more,omitempty"`
	ParentID     int64            `json:"parent_id,omitempty"`
	Batch        *apiBatch        `json:"batch,omitempty"`
	Workflow     *apiWorkflowTask `json:"workflow,omitempty"`
	Children     []apiChild       `json:"children"`
	ChildrenMore bool             `json:"children_more,omitempty"`
}

// apiStep is one named step of the job's message.
type apiStep struct {
	Name      string           `json:"name"`
	Status    twice.StepStatus `json:"status"` // done, running or uncertain
	Strategy  string           `json:"strategy"`
	ClaimedAt time.Time        `json:"claimed_at"`
	DoneAt    *time.Time       `json:"done_at,omitempty"`
	Receipt   json.RawMessage  `json:"receipt,omitempty"`
	JobID     int64            `json:"job_id"` // the job whose delivery claimed it
}

// apiBatch is the job's batch and its counters.
type apiBatch struct {
	ID            int64      `json:"id"`
	Open          bool       `json:"open"`
	OnSuccess     bool       `json:"on_success"`
	Total         int        `json:"total"`
	Pending       int        `json:"pending"`
	Completed     int        `json:"completed"`
	Dead          int        `json:"dead"`
	Cancelled     int        `json:"cancelled"`
	CallbackKind  string     `json:"callback_kind"`
	CallbackJobID int64      `json:"callback_job_id,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// apiWorkflowTask is the job's place in its workflow.
type apiWorkflowTask struct {
	ID   int64            `json:"id"`
	Task string           `json:"task"`
	Deps map[string]int64 `json:"deps"` // dependency task → its job
}

// apiChild is a job the job's completion inserted.
type apiChild struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"`
}

// storedJSON is stored JSON as a response may embed it: as it is when
// valid, as a string otherwise, so one bad row never spoils a response.
func storedJSON(b []byte) json.RawMessage {
	if b == nil || json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// jobDetailJSON shows d, its job's args redacted by the catalog kc.
func jobDetailJSON(d *twice.JobDetail, kc *kindCatalog) apiJobDetail {
	out := apiJobDetail{apiJob: jobJSON(d.Job, kc), Output: storedJSON(d.Output), Handler: d.Handler,
		Steps: []apiStep{}, StepsMore: d.StepsMore, ParentID: d.ParentID, Children: []apiChild{}, ChildrenMore: d.ChildrenMore}
	for _, s := range d.Steps {
		st := apiStep{Name: s.Step.Step, Status: s.Status, Strategy: s.Strategy, ClaimedAt: s.ClaimedAt.UTC(),
			Receipt: storedJSON(s.Receipt), JobID: s.JobID}
		if s.Done() {
			t := s.DoneAt.UTC()
			st.DoneAt = &t
		}
		out.Steps = append(out.Steps, st)
	}
	if b := d.Batch; b != nil {
		out.Batch = &apiBatch{ID: b.ID, Open: b.Open, OnSuccess: b.OnSuccess, Total: b.Total, Pending: b.Pending,
			Completed: b.Completed, Dead: b.Dead, Cancelled: b.Cancelled, CallbackKind: b.CallbackKind, CallbackJobID: b.CallbackJobID}
		if !b.FinishedAt.IsZero() {
			t := b.FinishedAt.UTC()
			out.Batch.FinishedAt = &t
		}
	}
	if w := d.Workflow; w != nil {
		out.Workflow = &apiWorkflowTask{ID: w.ID, Task: w.Task, Deps: w.Deps}
	}
	for _, c := range d.Children {
		out.Children = append(out.Children, apiChild{ID: c.ID, Kind: c.Kind, State: string(c.State)})
	}
	return out
}
