package twicestore

import (
	"context"
	"time"
)

// Pruner deletes what outlived its use, besides finished jobs
// (JobDeleteFinished), markers and steps: workflows and batches whose jobs
// are all gone, old switch and limit history, and nodes long dead. Each
// call deletes a bounded batch in short statements, so the runtime's
// pruner loops until a call says there is no more; two nodes pruning at
// once never delete a row twice or wait long for each other.
type Pruner interface {
	// WorkflowPrune deletes, with their tasks and dependency rows, the
	// workflows of ids after After, among the Limit lowest, that no job
	// belongs to any more: their jobs finished and were deleted by
	// retention (or by hand). A workflow with a job left, whatever its
	// state, is kept, and with it the tasks still waiting for that job; a
	// workflow left with no job can never move again (a task is only ever
	// enqueued by a completion of one of its jobs, or with the workflow),
	// even one whose waiting tasks waited on a dead job that was deleted.
	WorkflowPrune(ctx context.Context, p *WorkflowPruneParams) (*PruneScanResult, error)
	// BatchPrune deletes the sealed batches of ids after After, among the
	// Limit lowest, that no job belongs to any more and whose callback job
	// (if it got one) is gone too. An open batch is kept however long:
	// BatchAdd and BatchSeal may still come.
	BatchPrune(ctx context.Context, p *BatchPruneParams) (*PruneScanResult, error)
	// ToggleHistoryPrune deletes up to Limit switch-history rows changed
	// before Before, oldest first, except the newest row of each kind,
	// which is kept whatever its age: it says who set the switch as it
	// stands. A zero Before deletes nothing.
	ToggleHistoryPrune(ctx context.Context, p *ToggleHistoryPruneParams) (*PruneResult, error)
	// LimitHistoryPrune deletes up to Limit limit-history rows changed
	// before Before, oldest first, except the newest row of each scope and
	// name, which is kept whatever its age: it says who set the override
	// as it stands. A zero Before deletes nothing.
	LimitHistoryPrune(ctx context.Context, p *LimitHistoryPruneParams) (*PruneResult, error)
	// NodePrune deletes up to Limit nodes whose last heartbeat is before
	// HeartbeatBefore, oldest first. A zero HeartbeatBefore deletes
	// nothing.
	NodePrune(ctx context.Context, p *NodePruneParams) (*PruneResult, error)
}

// WorkflowPruneParams page through workflows by id: a pass starts at
// After 0 and goes on from each result's Next until it is 0.
type WorkflowPruneParams struct {
	// After is the id the call starts after.
	After int64
	// Limit is how many workflows one call looks at; zero or less looks
	// at all of them.
	Limit int
}

// BatchPruneParams page through batches by id, as WorkflowPruneParams do
// workflows.
type BatchPruneParams struct {
	After int64
	Limit int
}

// PruneScanResult is one page of a pruning scan by id.
type PruneScanResult struct {
	// Deleted counts the rows deleted.
	Deleted int
	// Next is the After of the next page: the highest id this call looked
	// at, or 0 when it looked at fewer than Limit (the scan is done).
	Next int64
}

// ToggleHistoryPruneParams select old switch history.
type ToggleHistoryPruneParams struct {
	Before time.Time
	// Limit caps the rows deleted; zero or less deletes them all.
	Limit int
}

// NodePruneParams select nodes long dead.
type NodePruneParams struct {
	HeartbeatBefore time.Time
	// Limit caps the nodes deleted; zero or less deletes them all.
	Limit int
}

// PruneResult counts the rows a prune deleted.
type PruneResult struct {
	Deleted int
}
