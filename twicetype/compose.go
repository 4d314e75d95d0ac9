package twicetype

import "time"

// WorkflowState is where a workflow is in its life.
type WorkflowState string

const (
	// WorkflowRunning is a workflow with tasks still to complete. One whose
	// Dead count is not zero is blocked (see Workflow.Blocked).
	WorkflowRunning WorkflowState = "running"
	// WorkflowCompleted is a workflow whose every task completed.
	WorkflowCompleted WorkflowState = "completed"
	// WorkflowFailed is a workflow with the cancel policy one of whose tasks
	// died: the tasks downstream of it were cancelled.
	WorkflowFailed WorkflowState = "failed"
	// WorkflowCancelled is a workflow an operator cancelled.
	WorkflowCancelled WorkflowState = "cancelled"
)

// Workflow policies for a task that dies (or is cancelled).
const (
	// WorkflowOnDeadHold keeps the dead task's dependants waiting: the
	// workflow shows as blocked, and goes on when the task is retried and
	// completes.
	WorkflowOnDeadHold = "hold"
	// WorkflowOnDeadCancel cancels every waiting task downstream of the
	// dead one; the workflow has failed.
	WorkflowOnDeadCancel = "cancel"
)

// Workflow is a stored graph of tasks, with counters the completions of its
// tasks keep up to date.
type Workflow struct {
	ID     int64
	Name   string
	OnDead string // WorkflowOnDeadHold or WorkflowOnDeadCancel
	State  WorkflowState
	// Tasks counts the workflow's tasks; Completed those whose job
	// completed; Dead those whose job is dead, discarded or cancelled now.
	Tasks, Completed, Dead int
	CreatedAt              time.Time
	FinishedAt             time.Time // zero while running
}

// Blocked reports whether a running workflow waits on a dead task that a
// human must retry (or discard, and cancel the workflow).
func (w *Workflow) Blocked() bool { return w.State == WorkflowRunning && w.Dead > 0 }

// WorkflowTaskState is where a task is before its job exists.
type WorkflowTaskState string

const (
	// WorkflowTaskWaiting is a task whose dependencies have not all
	// completed: it has no job yet.
	WorkflowTaskWaiting WorkflowTaskState = "waiting"
	// WorkflowTaskEnqueued is a task whose job was inserted (see its Job
	// for the job's own state).
	WorkflowTaskEnqueued WorkflowTaskState = "enqueued"
	// WorkflowTaskCancelled is a task that will never run: its workflow
	// was cancelled, or a task upstream died under the cancel policy.
	WorkflowTaskCancelled WorkflowTaskState = "cancelled"
)

// WorkflowTask is one task of a workflow.
type WorkflowTask struct {
	Name string
	Kind string
	// Deps names the tasks this one waits for, sorted.
	Deps []string
	// Pending counts the dependencies not completed yet.
	Pending int
	State   WorkflowTaskState
	// Job is the task's job once enqueued; nil before.
	Job *JobRow
}

// Batch is a group of jobs with a callback job inserted once when all of
// them have finished.
type Batch struct {
	ID int64
	// OnSuccess: the callback is inserted only when no job of the batch is
	// dead, discarded or cancelled (a retried one that then completes
	// counts as a success); otherwise once every job finished, however.
	OnSuccess bool
	// Open batches take more jobs; the callback waits for the batch to be
	// sealed.
	Open bool
	// Total counts the jobs added; Pending those not finished; Completed,
	// Dead (dead or discarded) and Cancelled (cancelled, or deleted before
	// they finished) the others.
	Total, Pending, Completed, Dead, Cancelled int
	// CallbackKind is the callback job's kind; CallbackJobID is its id once
	// inserted, zero before (and for ever, for an OnSuccess batch that
	// failed).
	CallbackKind  string
	CallbackJobID int64
	CreatedAt     time.Time
	// FinishedAt is when the batch finished: sealed, with no job pending.
	// Its callback, if one is due, was inserted then. Zero while a job is
	// pending, and again once a failed job of a batch still without a
	// callback is retried.
	FinishedAt time.Time
}

// Failed reports whether a finished batch finished with failures: some of
// its jobs are dead, discarded or cancelled. An OnSuccess batch that failed
// got no callback; retrying its failed jobs can still bring it.
func (b *Batch) Failed() bool { return !b.FinishedAt.IsZero() && b.Dead+b.Cancelled > 0 }
