package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twicejobs/twice"
)

// jobDetailJSON is 'jobs show --json': the job, and what it produced and
// belongs to.
type jobDetailJSON struct {
	*jobJSON
	// Output is what the handler recorded with RecordOutput; absent when
	// it recorded nothing or the job did not complete.
	Output json.RawMessage `json:"output,omitempty"`
	// Handler is the handler name the steps are claimed under.
	Handler   string     `json:"handler"`
	Steps     []stepJSON `json:"steps"`
	StepsMore bool       `json:"steps_more,omitempty"`
	// ParentID is the job whose completion inserted this one.
	ParentID     int64              `json:"parent_id,omitempty"`
	Batch        *batchJSON         `json:"batch,omitempty"`
	Workflow     *workflowPlaceJSON `json:"workflow,omitempty"`
	Children     []childJSON        `json:"children"`
	ChildrenMore bool               `json:"children_more,omitempty"`
}

// stepJSON is one named step of the job's message.
type stepJSON struct {
	Name string `json:"name"`
	// Status is done (receipt stored), running (claimed by the delivery
	// running now) or uncertain (claimed without a receipt by a delivery
	// that stopped: its effect may have happened).
	Status    twice.StepStatus `json:"status"`
	Strategy  string           `json:"strategy"`
	ClaimedAt time.Time        `json:"claimed_at"`
	DoneAt    *time.Time       `json:"done_at,omitempty"`
	Receipt   json.RawMessage  `json:"receipt,omitempty"`
	// JobID and Epoch are the delivery that claimed it: another job's
	// when a duplicate of the message ran it.
	JobID int64 `json:"job_id"`
	Epoch int64 `json:"epoch"`
}

// workflowPlaceJSON is the job's place in its workflow.
type workflowPlaceJSON struct {
	ID   int64            `json:"id"`
	Task string           `json:"task"`
	Deps map[string]int64 `json:"deps"` // dependency task → its job
}

// childJSON is a job the job's completion inserted.
type childJSON struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"`
}

// rawJSON is stored JSON as --json may embed it: as it is when valid, as
// a string otherwise, so one bad row never spoils the output.
func rawJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// newJobDetailJSON is d as 'jobs show --json' prints it.
func (k *kindBook) newJobDetailJSON(d *twice.JobDetail, now time.Time) *jobDetailJSON {
	out := &jobDetailJSON{jobJSON: k.newJobJSON(d.Job, true, now), Output: rawJSON(d.Output), Handler: d.Handler,
		Steps: []stepJSON{}, StepsMore: d.StepsMore, ParentID: d.ParentID, Children: []childJSON{}, ChildrenMore: d.ChildrenMore}
	for _, s := range d.Steps {
		sj := stepJSON{Name: s.Step.Step, Status: s.Status, Strategy: s.Strategy, ClaimedAt: s.ClaimedAt,
			Receipt: rawJSON(s.Receipt), JobID: s.JobID, Epoch: s.Epoch}
		if s.Done() {
			sj.DoneAt = &s.DoneAt
		}
		out.Steps = append(out.Steps, sj)
	}
	if d.Batch != nil {
		b := newBatchJSON(d.Batch)
		out.Batch = &b
	}
	if w := d.Workflow; w != nil {
		out.Workflow = &workflowPlaceJSON{ID: w.ID, Task: w.Task, Deps: w.Deps}
	}
	for _, c := range d.Children {
		out.Children = append(out.Children, childJSON{ID: c.ID, Kind: c.Kind, State: string(c.State)})
	}
	return out
}

// printJobDetail prints, after a job, what it produced and belongs to:
// its output, its steps, its batch, its workflow, its parent and its
// children. A section with nothing to say is left out, but for steps of
// a stepped kind.
func printJobDetail(w io.Writer, d *twice.JobDetail) error {
	if d.Output != nil {
		fmt.Fprintln(w, "\noutput")
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, d.Output, "", "  "); err != nil {
			pretty.Reset()
			pretty.Write(d.Output)
		}
		for _, line := range strings.Split(pretty.String(), "\n") {
			fmt.Fprintf(w, "  %s\n", terminalText(line))
		}
	}
	if len(d.Steps) > 0 {
		fmt.Fprintf(w, "\nsteps (%d, handler %s)\n", len(d.Steps), terminalText(d.Handler))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range d.Steps {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", terminalText(s.Step.Step), s.Status, terminalText(stepLine(d, s)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if d.StepsMore {
			fmt.Fprintf(w, "  (only the first %d steps are shown)\n", twice.JobDetailStepsMax)
		}
		if slices.ContainsFunc(d.Steps, func(s twice.JobStep) bool { return s.Status == twice.StepUncertain }) {
			fmt.Fprintln(w, "  an uncertain step's effect may have happened: check it, then settle the step (Client.StepSettle) before a retry")
		}
	}
	if b := d.Batch; b != nil {
		fmt.Fprintf(w, "\nbatch %d  %s: %d of %d completed, %d pending, %d dead, %d cancelled; callback %s\n",
			b.ID, batchState(b), b.Completed, b.Total, b.Pending, b.Dead, b.Cancelled, terminalText(batchCallback(b)))
	}
	if wf := d.Workflow; wf != nil {
		fmt.Fprintf(w, "\nworkflow %d  task %s", wf.ID, terminalText(wf.Task))
		if len(wf.Deps) > 0 {
			var deps []string
			for _, name := range slices.Sorted(maps.Keys(wf.Deps)) {
				deps = append(deps, fmt.Sprintf("%s (job %d)", name, wf.Deps[name]))
			}
			fmt.Fprintf(w, ", after %s", terminalText(strings.Join(deps, ", ")))
		}
		fmt.Fprintln(w)
	}
	if d.ParentID != 0 {
		fmt.Fprintf(w, "\nparent job %d (its completion inserted this job)\n", d.ParentID)
	}
	if len(d.Children) > 0 {
		fmt.Fprintf(w, "\nchildren (%d, inserted by this job's completion)\n", len(d.Children))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, c := range d.Children {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", c.ID, terminalText(c.Kind), c.State)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if d.ChildrenMore {
			fmt.Fprintf(w, "  (only the first %d children are shown)\n", twice.JobDetailChildrenMax)
		}
	}
	return nil
}

// stepLine says when a step was claimed and finished, by which delivery
// when not this job's, and its receipt.
func stepLine(d *twice.JobDetail, s twice.JobStep) string {
	line := s.Strategy + ", claimed " + formatTime(s.ClaimedAt)
	if s.JobID != d.Job.ID {
		line += fmt.Sprintf(" by job %d", s.JobID)
	}
	if s.Done() {
		line += ", done " + formatTime(s.DoneAt) + ", receipt " + firstLine(string(s.Receipt), 80)
	}
	return line
}
