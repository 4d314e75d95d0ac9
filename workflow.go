package twice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ErrInvalidWorkflow is wrapped by the errors of a workflow that cannot be
// enqueued as declared (a cycle, an unknown or repeated task name): nothing
// of it is stored (usage).
var ErrInvalidWorkflow = usageError("invalid workflow")

// Workflow is a graph of jobs to enqueue at once: each task is a job that
// is enqueued when every task it depends on has completed. Build it with
// NewWorkflow and Add, then enqueue it with Client.EnqueueWorkflow.
//
// Each dependency is an edge that fires exactly once: the dependant's
// waiting count drops, and the dependant is enqueued when it reaches
// zero, in the same transaction that records its dependency's
// completion. So a task runs once all its dependencies completed (fan-in),
// one completion can release many tasks (fan-out), and redelivered or
// fenced completions release nothing twice.
type Workflow struct {
	name   string
	onDead string
	tasks  []workflowTask
}

type workflowTask struct {
	name string
	args Args
	opts *EnqueueOpts
	deps []string
}

// NewWorkflow starts a workflow named name (for people: listings, the
// dashboard). By default a task that dies holds its dependants; see
// CancelOnDead.
func NewWorkflow(name string) *Workflow {
	return &Workflow{name: name, onDead: twicetype.WorkflowOnDeadHold}
}

// Add declares a task: a job of args (with opts, which may be nil) that
// waits for the tasks named in deps. Tasks may be added in any order;
// EnqueueWorkflow checks the graph. Add returns the workflow, for chaining.
//
// opts.RunAt or opts.Delay (counted from EnqueueWorkflow) give the task a
// due time of its own: its job runs at that time or once its last
// dependency has completed, whichever is later.
func (w *Workflow) Add(task string, args Args, opts *EnqueueOpts, deps ...string) *Workflow {
	w.tasks = append(w.tasks, workflowTask{name: task, args: args, opts: opts, deps: deps})
	return w
}

// CancelOnDead makes a task that dies (or is cancelled) cancel every task
// downstream of it that still waits; the workflow has failed, though
// branches that do not depend on the dead task go on. Without it, the dead
// task holds its dependants: the workflow shows as blocked until the task
// is retried and completes.
func (w *Workflow) CancelOnDead() *Workflow {
	w.onDead = twicetype.WorkflowOnDeadCancel
	return w
}

// validate checks names, dependencies and cycles, naming the culprit.
func (w *Workflow) validate() error {
	if len(w.tasks) == 0 {
		return fmt.Errorf("%w %q: it has no tasks: Add at least one", ErrInvalidWorkflow, w.name)
	}
	if err := checkText("workflow name", w.name, MaxKeyBytes); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidWorkflow, err)
	}
	index := make(map[string]int, len(w.tasks))
	for i, t := range w.tasks {
		if err := checkText("task name", t.name, MaxKeyBytes); err != nil || t.name == "" {
			return fmt.Errorf("%w %q: task %d: name %q: use a non-empty name of at most %d bytes of text",
				ErrInvalidWorkflow, w.name, i, t.name, MaxKeyBytes)
		}
		if j, dup := index[t.name]; dup {
			return fmt.Errorf("%w %q: task %q is added twice (tasks %d and %d): give each task its own name",
				ErrInvalidWorkflow, w.name, t.name, j, i)
		}
		index[t.name] = i
	}
	for _, t := range w.tasks {
		seen := map[string]bool{}
		for _, d := range t.deps {
			if _, ok := index[d]; !ok {
				return fmt.Errorf("%w %q: task %q depends on %q, which is not a task of the workflow: Add it, or fix the name",
					ErrInvalidWorkflow, w.name, t.name, d)
			}
			if seen[d] {
				return fmt.Errorf("%w %q: task %q lists dependency %q twice", ErrInvalidWorkflow, w.name, t.name, d)
			}
			seen[d] = true
		}
	}
	// Depth-first search; a task met again while on the stack closes a
	// cycle, which is reported as the path around it.
	const (
		unseen = iota
		onStack
		done
	)
	mark := make([]int, len(w.tasks))
	var stack []string
	var visit func(i int) error
	visit = func(i int) error {
		mark[i] = onStack
		stack = append(stack, w.tasks[i].name)
		for _, d := range w.tasks[i].deps {
			j := index[d]
			switch mark[j] {
			case onStack:
				from := slices.Index(stack, d)
				cycle := append(slices.Clone(stack[from:]), d)
				slices.Reverse(cycle)
				return fmt.Errorf("%w %q: its tasks depend on each other in a cycle (%s), so none of them could ever start: "+
					"remove one of those dependencies", ErrInvalidWorkflow, w.name, strings.Join(cycle, " → "))
			case unseen:
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		stack = stack[:len(stack)-1]
		mark[i] = done
		return nil
	}
	for i := range w.tasks {
		if mark[i] == unseen {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// WorkflowResult is an enqueued workflow.
type WorkflowResult struct {
	// Workflow is the stored workflow; its ID names it to WorkflowGet and
	// WorkflowCancel.
	Workflow *twicetype.Workflow
	// Jobs are the jobs of the tasks that depend on nothing, enqueued now.
	Jobs []*twicetype.JobRow
}

// EnqueueWorkflow checks the workflow (a cycle or an unknown dependency is
// an error naming it, wrapping ErrInvalidWorkflow and storing nothing) and
// stores it in one transaction, enqueueing the tasks that depend on
// nothing.
func (c *Client) EnqueueWorkflow(ctx context.Context, w *Workflow) (*WorkflowResult, error) {
	return c.enqueueWorkflow(ctx, c.store, w, true)
}

// EnqueueWorkflowTx is EnqueueWorkflow in the caller's transaction: the
// whole workflow commits with the caller's own writes, or not at all.
func (c *Client) EnqueueWorkflowTx(ctx context.Context, tx any, w *Workflow) (*WorkflowResult, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue workflow in transaction: %w", err)
	}
	return c.enqueueWorkflow(ctx, exec, w, false)
}

func (c *Client) enqueueWorkflow(ctx context.Context, exec twicestore.Executor, w *Workflow, notify bool) (*WorkflowResult, error) {
	if w == nil {
		return nil, fmt.Errorf("twice: enqueue workflow: %w: the workflow is nil: build one with NewWorkflow", ErrInvalidWorkflow)
	}
	if err := w.validate(); err != nil {
		return nil, fmt.Errorf("twice: enqueue workflow: %w", err)
	}
	ctx, end := c.traceEnqueue(ctx, traceOpWorkflow, len(w.tasks))
	res, err := c.insertWorkflow(ctx, exec, w, notify)
	var rows []*twicetype.JobRow
	if res != nil {
		rows = res.Jobs
	}
	end(rows, err)
	return res, err
}

// insertWorkflow checks and stores a valid workflow.
func (c *Client) insertWorkflow(ctx context.Context, exec twicestore.Executor, w *Workflow, notify bool) (*WorkflowResult, error) {
	jobs := make([]EnqueueParams, len(w.tasks))
	for i, t := range w.tasks {
		if t.opts != nil && t.opts.UniqueKey != "" {
			return nil, fmt.Errorf("twice: enqueue workflow %q: %w: task %q has a UniqueKey; a task runs once per workflow already, "+
				"so leave it out", w.name, ErrInvalidWorkflow, t.name)
		}
		jobs[i] = EnqueueParams{Args: t.args, Opts: t.opts}
	}
	params, err := c.insertParamsMany(ctx, jobs)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue workflow %q: %w", w.name, err)
	}
	p := &twicestore.WorkflowInsertParams{Name: w.name, OnDead: w.onDead, CreatedAt: c.now()}
	for i, t := range w.tasks {
		// A task without RunAt or Delay has no due time of its own: it is
		// due when released, on the database's clock, not at this
		// process's now.
		if t.opts == nil || (t.opts.RunAt.IsZero() && t.opts.Delay == 0) {
			params[i].RunAt = time.Time{}
		}
		p.Tasks = append(p.Tasks, &twicestore.WorkflowTaskParams{Name: t.name, Deps: t.deps, Job: params[i]})
	}
	res, err := exec.WorkflowInsert(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue workflow %q: %w", w.name, err)
	}
	if notify && len(res.Jobs) > 0 {
		c.notify()
	}
	return &WorkflowResult{Workflow: res.Workflow, Jobs: res.Jobs}, nil
}

// WorkflowInfo is a workflow with its tasks.
type WorkflowInfo struct {
	Workflow *twicetype.Workflow
	// Tasks by name, each with its dependencies and, once enqueued, its
	// job (whose ID reads a dependency's output with JobResult, where
	// stored).
	Tasks []*twicetype.WorkflowTask
}

// Task returns the task named name, or nil.
func (w *WorkflowInfo) Task(name string) *twicetype.WorkflowTask {
	for _, t := range w.Tasks {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// WorkflowGet returns a workflow and its tasks; an unknown id is an error
// wrapping ErrWorkflowNotFound (which matches twicestore.ErrNotFound too).
func (c *Client) WorkflowGet(ctx context.Context, id int64) (*WorkflowInfo, error) {
	res, err := c.store.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: id})
	if err != nil {
		return nil, workflowError(id, err)
	}
	return &WorkflowInfo{Workflow: res.Workflow, Tasks: res.Tasks}, nil
}

// WorkflowListOpts filter a workflow listing; nil lists the newest 100.
type WorkflowListOpts struct {
	State  twicetype.WorkflowState // empty: any
	Before int64                   // next page: ids below this one
	Limit  int                     // Defaults to 100.
}

// WorkflowList lists workflows, newest first.
func (c *Client) WorkflowList(ctx context.Context, opts *WorkflowListOpts) ([]*twicetype.Workflow, error) {
	var o WorkflowListOpts
	if opts != nil {
		o = *opts
	}
	if err := checkFields(freetext.Field{Name: "workflow state", Value: string(o.State), Max: MaxNameBytes}); err != nil {
		return nil, fmt.Errorf("twice: list workflows: %w", err)
	}
	switch o.State {
	case "", twicetype.WorkflowRunning, twicetype.WorkflowCompleted, twicetype.WorkflowFailed, twicetype.WorkflowCancelled:
	default:
		return nil, fmt.Errorf("twice: list workflows: %w", invalidf("workflow state %q is not one of %s, %s, %s or %s", o.State,
			twicetype.WorkflowRunning, twicetype.WorkflowCompleted, twicetype.WorkflowFailed, twicetype.WorkflowCancelled))
	}
	res, err := c.store.WorkflowList(ctx, &twicestore.WorkflowListParams{State: o.State, Before: o.Before, Limit: o.Limit})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	return res.Workflows, nil
}

// WorkflowCancel cancels a running workflow: its waiting tasks never run,
// and its jobs not finished yet are cancelled (a running one is asked to
// stop, as JobCancel does). by and reason are recorded on the jobs. An
// unknown id is an error wrapping ErrWorkflowNotFound.
func (c *Client) WorkflowCancel(ctx context.Context, id int64, by, reason string) (*twicestore.WorkflowCancelResult, error) {
	return c.workflowCancel(ctx, c.store, id, by, reason)
}

// WorkflowCancelTx is WorkflowCancel in the caller's transaction.
func (c *Client) WorkflowCancelTx(ctx context.Context, tx any, id int64, by, reason string) (*twicestore.WorkflowCancelResult, error) {
	exec, err := c.adminExec("cancel workflow", tx)
	if err != nil {
		return nil, err
	}
	return c.workflowCancel(ctx, exec, id, by, reason)
}

func (c *Client) workflowCancel(ctx context.Context, exec twicestore.Executor, id int64, by, reason string) (*twicestore.WorkflowCancelResult, error) {
	if err := checkFields(byField(by), reasonField(reason)); err != nil {
		return nil, fmt.Errorf("twice: cancel workflow %d: %w", id, err)
	}
	res, err := exec.WorkflowCancel(ctx, &twicestore.WorkflowCancelParams{ID: id, By: by, Reason: reason, Now: c.now()})
	if err != nil {
		return nil, workflowError(id, err)
	}
	return res, nil
}

// workflowError wraps a store error about workflow id: not found becomes
// ErrWorkflowNotFound with the id and what to do, as JobGet does for jobs;
// any other error already names the workflow.
func workflowError(id int64, err error) error {
	if errors.Is(err, twicestore.ErrNotFound) {
		return fmt.Errorf("twice: workflow %d: %w: check the id (WorkflowList lists them)", id, ErrWorkflowNotFound)
	}
	return fmt.Errorf("twice: %w", err)
}
