package twice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The most steps and children JobDetail lists; StepsMore and ChildrenMore
// say when a job has more.
const (
	JobDetailStepsMax    = 100
	JobDetailChildrenMax = 100
)

// JobDetail is a job with what it produced and what it belongs to: its
// output, its message's named steps, its batch, its workflow, the job
// whose completion inserted it and the jobs its completion inserted.
type JobDetail struct {
	Job *twicetype.JobRow
	// Output is what the handler recorded with RecordOutput, as JSON; nil
	// when it recorded nothing or the job did not complete.
	Output json.RawMessage
	// Handler is the handler name the steps are claimed under: the
	// registry's for a kind this client registers, else the kind (the
	// default).
	Handler string
	// Steps are the named steps (Step) of the job's message under
	// Handler, by name, at most JobDetailStepsMax; StepsMore says there
	// are more. They belong to the message: a duplicate of it (another
	// job with the same key) shares them.
	Steps     []JobStep
	StepsMore bool
	// ParentID is the job whose completion inserted this one (Then, a
	// batch's callback); 0 for none.
	ParentID int64
	// Batch is the batch the job is in, with its counters; nil for none.
	Batch *twicetype.Batch
	// Workflow is the job's place in its workflow; nil for none.
	Workflow *JobWorkflow
	// Children are the jobs the job's completion inserted, by id, at most
	// JobDetailChildrenMax; ChildrenMore says there are more.
	Children     []*twicetype.JobRow
	ChildrenMore bool
}

// JobStep is one named step of a job's message, with what its claim says.
type JobStep struct {
	twicetype.Step
	Status StepStatus
}

// StepStatus says where a named step is.
type StepStatus string

// The statuses of a step.
const (
	// StepDone is a step whose receipt is stored: a redelivery reads the
	// receipt and never runs the step again.
	StepDone StepStatus = "done"
	// StepRunning is a step claimed, without a receipt yet, by the
	// delivery running the job now: its effect is under way.
	StepRunning StepStatus = "running"
	// StepUncertain is a step claimed without a receipt by a delivery that
	// is no longer running: its effect may or may not have happened. A
	// person checks and settles it (Client.StepSettle) before the job is
	// retried.
	StepUncertain StepStatus = "uncertain"
)

// JobWorkflow is a job's place in its workflow.
type JobWorkflow struct {
	ID   int64
	Task string
	// Deps maps each task the job's task depends on to that task's job.
	Deps map[string]int64
}

// JobDetail returns job id with its composition, in a bounded number of
// store reads (at most eight, whatever the job: the kind catalog is read
// for a kind this client does not register): what `twice jobs show`
// and the dashboard's job page show. An unknown id is an error wrapping
// ErrJobNotFound.
func (c *Client) JobDetail(ctx context.Context, id int64) (*JobDetail, error) {
	job, err := c.JobGet(ctx, id)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*JobDetail, error) {
		if errors.Is(err, twicestore.ErrNotFound) { // deleted meanwhile
			return nil, fmt.Errorf("twice: job %d: %w", id, ErrJobNotFound)
		}
		return nil, fmt.Errorf("twice: job %d: %w", id, err)
	}
	handler, err := c.handlerOf(ctx, job.Kind)
	if err != nil {
		return fail(err)
	}
	d := &JobDetail{Job: job, Handler: handler}
	if job.State == twicetype.JobStateCompleted {
		out, err := c.store.JobOutput(ctx, &twicestore.JobGetParams{ID: id})
		if err != nil {
			return fail(err)
		}
		d.Output = out.Output
	}
	steps, err := c.store.StepList(ctx, &twicestore.StepListParams{Handler: d.Handler, Key: job.Key, Limit: JobDetailStepsMax + 1})
	if err != nil {
		return fail(err)
	}
	d.StepsMore = len(steps.Steps) > JobDetailStepsMax
	for _, s := range steps.Steps[:min(len(steps.Steps), JobDetailStepsMax)] {
		d.Steps = append(d.Steps, JobStep{Step: *s, Status: stepStatus(job, s)})
	}
	links, err := c.store.JobLinks(ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		return fail(err)
	}
	d.ParentID = links.ParentID
	if links.BatchID != 0 {
		if d.Batch, err = c.store.BatchGet(ctx, &twicestore.BatchGetParams{ID: links.BatchID}); err != nil && !errors.Is(err, twicestore.ErrNotFound) {
			return fail(err) // a batch pruned meanwhile is no batch
		}
	}
	task, err := c.store.WorkflowTaskOf(ctx, &twicestore.WorkflowTaskOfParams{JobID: id})
	switch {
	case err == nil:
		d.Workflow = &JobWorkflow{ID: task.WorkflowID, Task: task.Task, Deps: task.Deps}
	case !errors.Is(err, twicestore.ErrNotFound):
		return fail(err)
	}
	kids, err := c.store.JobChildren(ctx, &twicestore.JobChildrenParams{ParentID: id, Limit: JobDetailChildrenMax + 1})
	if err != nil {
		return fail(err)
	}
	d.ChildrenMore = len(kids) > JobDetailChildrenMax
	d.Children = kids[:min(len(kids), JobDetailChildrenMax)]
	return d, nil
}

// handlerOf is the handler name kind's markers and steps are written
// under: the registry's, or for a kind this client does not register, the
// one its catalog entry publishes (the kind itself, the registration
// default, without an entry or a name in it). Only an unregistered kind
// costs a read.
func (c *Client) handlerOf(ctx context.Context, kind string) (string, error) {
	if e := c.registry.lookup(kind); e != nil && e.opts.HandlerName != "" {
		return e.opts.HandlerName, nil
	}
	cat, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return "", fmt.Errorf("read the kind catalog: %w", err)
	}
	for _, k := range cat.Kinds {
		if k.Kind == kind {
			return k.Handler(), nil
		}
	}
	return kind, nil
}

// stepStatus says what s's claim means for job: a receipt is done; a
// claim of the delivery running now is under way; any other claim
// without a receipt is uncertain.
func stepStatus(job *twicetype.JobRow, s *twicetype.Step) StepStatus {
	switch {
	case s.Done():
		return StepDone
	case job.State == twicetype.JobStateRunning && s.JobID == job.ID && s.Epoch == job.Epoch:
		return StepRunning
	}
	return StepUncertain
}
