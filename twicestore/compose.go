package twicestore

import (
	"context"
	"errors"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// ErrBatchSealed means jobs were added to a batch that is sealed: its
// callback may have run already, so the batch takes no more jobs.
var ErrBatchSealed = errors.New("twicestore: batch is sealed")

// Composer stores what composes jobs: workflows (tasks waiting on other
// tasks) and batches (jobs with a callback). Every edge fires in the
// transaction of the state change that causes it, so it fires exactly once
// whatever the delivery count:
//
//   - A continuation: JobFinish inserts an outcome's Children when it
//     writes that completed outcome under its running + epoch guard, or,
//     for an outcome with a Marker, exactly when this call's claim of the
//     marker is the one stored (the effect is this attempt's even if its
//     lease was lost, and a redelivery finds the marker and no-ops). A
//     failed outcome inserts none.
//   - A workflow task's job is inserted when its last dependency's job
//     completes, by whatever write completes it.
//   - A batch's callback is inserted when the last of its jobs finishes
//     (and the batch is sealed), by whatever write finishes it.
type Composer interface {
	// WorkflowInsert stores a workflow and its tasks and enqueues the
	// tasks with no dependencies, in one transaction. The caller has
	// checked the graph (names unique, dependencies known, no cycle).
	WorkflowInsert(ctx context.Context, p *WorkflowInsertParams) (*WorkflowInsertResult, error)
	// WorkflowGet returns a workflow with its tasks, or ErrNotFound.
	WorkflowGet(ctx context.Context, p *WorkflowGetParams) (*WorkflowGetResult, error)
	// WorkflowList lists workflows newest first, keyset-paginated.
	WorkflowList(ctx context.Context, p *WorkflowListParams) (*WorkflowListResult, error)
	// WorkflowCancel cancels a running workflow: its waiting tasks will
	// never run, and its unfinished jobs are cancelled as JobCancel does.
	// A finished workflow is left as it is. ErrNotFound when none.
	WorkflowCancel(ctx context.Context, p *WorkflowCancelParams) (*WorkflowCancelResult, error)

	// BatchInsert stores a batch with its first jobs, in one transaction.
	// A sealed batch with no pending job inserts its callback at once.
	BatchInsert(ctx context.Context, p *BatchInsertParams) (*BatchInsertResult, error)
	// BatchAdd adds jobs to an open batch, or returns ErrBatchSealed (or
	// ErrNotFound).
	BatchAdd(ctx context.Context, p *BatchAddParams) (*BatchAddResult, error)
	// BatchSeal closes a batch to new jobs; when none is pending, its
	// callback is inserted in the same transaction. Sealing a sealed
	// batch changes nothing.
	BatchSeal(ctx context.Context, p *BatchSealParams) (*twicetype.Batch, error)
	// BatchGet returns a batch's counters, or ErrNotFound.
	BatchGet(ctx context.Context, p *BatchGetParams) (*twicetype.Batch, error)
	// BatchList lists batches newest first, a page at a time; with
	// Unfinished, only those whose callback is still to come.
	BatchList(ctx context.Context, p *BatchListParams) (*BatchListResult, error)

	// JobChildren lists the jobs a job's completion inserted (its
	// continuations, and a batch's callback for the batch job that
	// finished it), by id, at most Limit of them when Limit is positive.
	JobChildren(ctx context.Context, p *JobChildrenParams) ([]*twicetype.JobRow, error)
	// JobLinks tells what a job belongs to: the job whose completion
	// inserted it and the batch it is in (0 for none), or ErrNotFound.
	JobLinks(ctx context.Context, p *JobGetParams) (*JobLinksResult, error)
	// WorkflowTaskOf tells which workflow task a job is, and the jobs of
	// that task's dependencies (all completed by the time the task's job
	// exists), or ErrNotFound when the job belongs to no workflow.
	WorkflowTaskOf(ctx context.Context, p *WorkflowTaskOfParams) (*WorkflowTaskOfResult, error)
}

// WorkflowTaskOfParams name a job.
type WorkflowTaskOfParams struct {
	JobID int64
}

// WorkflowTaskOfResult is a job's place in its workflow.
type WorkflowTaskOfResult struct {
	WorkflowID int64
	Task       string
	// Deps maps each dependency's task name to its job's id.
	Deps map[string]int64
}

// JobChildrenParams name the parent job.
type JobChildrenParams struct {
	ParentID int64
	// Limit bounds the children listed, the lowest ids first; zero or
	// less lists them all.
	Limit int
}

// JobLinksResult is what a job belongs to.
type JobLinksResult struct {
	// ParentID is the job whose completion inserted this one (a
	// continuation's, a batch callback's); 0 for none.
	ParentID int64
	// BatchID is the batch the job is in; 0 for none. A batch's callback
	// is not in its batch: its ParentID is the job that finished it.
	BatchID int64
}

// WorkflowTaskParams is one task of a workflow to insert.
type WorkflowTaskParams struct {
	Name string
	Deps []string
	// Job is the task's job. Its RunAt, when set, is the task's own due
	// time: the job is due then or when the task's last dependency
	// completes (a root: when the workflow is stored), whichever is later;
	// zero means no time of its own. Its CreatedAt is ignored: the job is
	// created when the task is released.
	Job *JobInsertParams
}

// WorkflowInsertParams is a workflow to insert.
type WorkflowInsertParams struct {
	Name      string
	OnDead    string // twicetype.WorkflowOnDeadHold (the default when empty) or WorkflowOnDeadCancel
	Tasks     []*WorkflowTaskParams
	CreatedAt time.Time
}

// WorkflowInsertResult is the stored workflow and the jobs of its root
// tasks.
type WorkflowInsertResult struct {
	Workflow *twicetype.Workflow
	Jobs     []*twicetype.JobRow
}

// WorkflowGetParams name a workflow.
type WorkflowGetParams struct {
	ID int64
}

// WorkflowGetResult is a workflow with its tasks, by name.
type WorkflowGetResult struct {
	Workflow *twicetype.Workflow
	Tasks    []*twicetype.WorkflowTask

	byName map[string]*twicetype.WorkflowTask
}

// AddTask appends a task, as a driver reads the tasks in name order.
func (r *WorkflowGetResult) AddTask(t *twicetype.WorkflowTask) {
	if r.byName == nil {
		r.byName = map[string]*twicetype.WorkflowTask{}
	}
	r.Tasks = append(r.Tasks, t)
	r.byName[t.Name] = t
}

// AddDep records that task depends on dep (read in dep order per task);
// a task not added is ignored.
func (r *WorkflowGetResult) AddDep(dep, task string) {
	if t := r.byName[task]; t != nil {
		t.Deps = append(t.Deps, dep)
	}
}

// SetJob sets task's job; a task not added is ignored.
func (r *WorkflowGetResult) SetJob(task string, j *twicetype.JobRow) {
	if t := r.byName[task]; t != nil {
		t.Job = j
	}
}

// WorkflowListParams filter and page a workflow listing.
type WorkflowListParams struct {
	State twicetype.WorkflowState // empty: any
	// Before, when set, lists workflows with a lower id (the next page).
	Before int64
	Limit  int
}

// WorkflowListResult is one page of workflows, newest first.
type WorkflowListResult struct {
	Workflows []*twicetype.Workflow
}

// WorkflowCancelParams cancel a workflow.
type WorkflowCancelParams struct {
	ID     int64
	By     string
	Reason string
	Now    time.Time
}

// WorkflowCancelResult tells what the cancel did.
type WorkflowCancelResult struct {
	Workflow *twicetype.Workflow
	// Tasks counts the waiting tasks cancelled; Jobs is JobCancel's result
	// for the workflow's unfinished jobs.
	Tasks int
	Jobs  *JobBulkResult
}

// BatchInsertParams is a batch to store.
type BatchInsertParams struct {
	OnSuccess bool
	Open      bool // take more jobs (BatchAdd) until BatchSeal
	Callback  *JobInsertParams
	Jobs      []*JobInsertParams // their BatchID is set by the store
	CreatedAt time.Time
}

// BatchInsertResult is the stored batch and its jobs' insert results.
type BatchInsertResult struct {
	Batch *twicetype.Batch
	Jobs  []*JobInsertResult
}

// BatchAddParams add jobs to an open batch.
type BatchAddParams struct {
	ID   int64
	Jobs []*JobInsertParams
}

// BatchAddResult has the insert results, in input order. A job left out as
// a duplicate (its unique key held) does not join the batch.
type BatchAddResult struct {
	Batch *twicetype.Batch
	Jobs  []*JobInsertResult
}

// BatchSealParams seal a batch.
type BatchSealParams struct {
	ID  int64
	Now time.Time
}

// BatchGetParams name a batch.
type BatchGetParams struct {
	ID int64
}

// The rules below are the drivers' to follow alike; only their SQL
// differs.

// WorkflowListLimitDefault is how many workflows WorkflowList returns when
// Limit is zero or less.
const WorkflowListLimitDefault = 100

// Page returns the listing's bounds with the defaults applied: the id to
// list below (all ids when Before is not set) and the page size.
func (p *WorkflowListParams) Page() (before int64, limit int) {
	before, limit = p.Before, p.Limit
	if limit <= 0 {
		limit = WorkflowListLimitDefault
	}
	if before <= 0 {
		before = 1<<63 - 1
	}
	return before, limit
}

// BatchListParams select one page of batches.
type BatchListParams struct {
	// Unfinished lists only batches not finished yet (FinishedAt zero).
	Unfinished bool
	// Before, when set, lists batches with a lower id (the next page).
	Before int64
	// Limit is the page's size; WorkflowListLimitDefault when zero.
	Limit int
}

// Page is the page's bounds: the id to list below (the largest when
// Before is not set) and the limit.
func (p *BatchListParams) Page() (before int64, limit int) {
	w := WorkflowListParams{Before: p.Before, Limit: p.Limit}
	return w.Page()
}

// BatchListResult is one page of batches, newest first.
type BatchListResult struct {
	Batches []*twicetype.Batch
}

// OnDeadPolicy is the workflow's policy for a dead task, the default
// (twicetype.WorkflowOnDeadHold) when OnDead is empty.
func (p *WorkflowInsertParams) OnDeadPolicy() string {
	if p.OnDead == "" {
		return twicetype.WorkflowOnDeadHold
	}
	return p.OnDead
}
