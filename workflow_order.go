package twice

import (
	"slices"

	"github.com/twicejobs/twice/twicetype"
)

// TasksInOrder returns the workflow's tasks in dependency order: every
// task after the tasks it waits for, and among tasks free to come next,
// by name. A listing in this order reads top to bottom as the workflow
// runs.
func (w *WorkflowInfo) TasksInOrder() []*twicetype.WorkflowTask {
	byName := make(map[string]*twicetype.WorkflowTask, len(w.Tasks))
	waits := make(map[string]int, len(w.Tasks))
	dependants := make(map[string][]string, len(w.Tasks))
	for _, t := range w.Tasks {
		byName[t.Name] = t
	}
	for _, t := range w.Tasks {
		for _, d := range t.Deps {
			if _, ok := byName[d]; ok {
				waits[t.Name]++
				dependants[d] = append(dependants[d], t.Name)
			}
		}
	}
	var ready []string
	for _, t := range w.Tasks {
		if waits[t.Name] == 0 {
			ready = append(ready, t.Name)
		}
	}
	out := make([]*twicetype.WorkflowTask, 0, len(w.Tasks))
	for len(ready) > 0 {
		slices.Sort(ready)
		name := ready[0]
		ready = ready[1:]
		out = append(out, byName[name])
		for _, d := range dependants[name] {
			if waits[d]--; waits[d] == 0 {
				ready = append(ready, d)
			}
		}
	}
	if len(out) < len(w.Tasks) { // a cycle cannot be stored; list the rest anyway
		for _, t := range w.Tasks {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// WorkflowCounts counts a workflow's tasks by where each is now.
type WorkflowCounts struct {
	// Completed tasks' jobs completed.
	Completed int
	// Running tasks' jobs are running; Waiting ones' jobs are parked on a
	// signal or a timer (durable waits).
	Running, Waiting int
	// Queued tasks' jobs wait to run (due or scheduled); Pending tasks
	// wait for their dependencies and have no job yet.
	Queued, Pending int
	// Dead tasks' jobs are dead or discarded: they hold or cancel their
	// dependants (the workflow's OnDead).
	Dead int
	// Cancelled tasks were cancelled, as jobs or before they had one.
	Cancelled int
}

// Counts counts the workflow's tasks by state, telling a cancelled task
// from a dead one (the workflow's own Dead count holds both).
func (w *WorkflowInfo) Counts() WorkflowCounts {
	var c WorkflowCounts
	for _, t := range w.Tasks {
		if t.Job == nil {
			if t.State == twicetype.WorkflowTaskCancelled {
				c.Cancelled++
			} else {
				c.Pending++
			}
			continue
		}
		switch t.Job.State {
		case twicetype.JobStateCompleted:
			c.Completed++
		case twicetype.JobStateRunning:
			c.Running++
		case twicetype.JobStateWaiting:
			c.Waiting++
		case twicetype.JobStateDead, twicetype.JobStateDiscarded:
			c.Dead++
		case twicetype.JobStateCancelled:
			c.Cancelled++
		default:
			c.Queued++
		}
	}
	return c
}
