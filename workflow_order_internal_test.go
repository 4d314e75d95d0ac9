package twice

import (
	"strings"
	"testing"

	"github.com/twicejobs/twice/twicetype"
)

// TestTasksInOrder: dependencies first, then by name among the free; the
// counts tell cancelled from dead.
func TestTasksInOrder(t *testing.T) {
	task := func(name string, state twicetype.JobState, deps ...string) *twicetype.WorkflowTask {
		wt := &twicetype.WorkflowTask{Name: name, Deps: deps}
		if state != "" {
			wt.Job = &twicetype.JobRow{State: state}
		} else {
			wt.State = twicetype.WorkflowTaskWaiting
		}
		return wt
	}
	// Stored by name, as WorkflowGet returns them.
	w := &WorkflowInfo{Tasks: []*twicetype.WorkflowTask{
		task("a-publish", "", "resize", "thumbnail"),
		task("fetch", twicetype.JobStateCompleted),
		task("resize", twicetype.JobStateCancelled, "fetch"),
		task("thumbnail", twicetype.JobStateDead, "fetch"),
		task("zz-audit", twicetype.JobStateWaiting),
	}}
	var names []string
	for _, t := range w.TasksInOrder() {
		names = append(names, t.Name)
	}
	if got, want := strings.Join(names, " "), "fetch resize thumbnail a-publish zz-audit"; got != want {
		t.Errorf("TasksInOrder = %s, want %s", got, want)
	}
	if c := w.Counts(); c != (WorkflowCounts{Completed: 1, Waiting: 1, Pending: 1, Dead: 1, Cancelled: 1}) {
		t.Errorf("Counts = %+v", c)
	}
}
