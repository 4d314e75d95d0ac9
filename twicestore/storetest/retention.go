package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// retentionTests check that what composes jobs leaves with its last job,
// and that the switch and limit history and the node list are bounded
// (Pruner).
var retentionTests = []test{
	{"WorkflowLeavesWithLastJob", testWorkflowPrune},
	{"BatchLeavesWithLastJob", testBatchPrune},
	{"ToggleHistoryBounded", testToggleHistoryPrune},
	{"LimitHistoryBounded", testLimitHistoryPrune},
	{"DeadNodesGo", testNodePrune},
}

// deleteFinished deletes every finished job, or every one but the dead,
// as retention would once their windows passed.
func (e *env) deleteFinished(keepDead bool) {
	e.t.Helper()
	later := e.at(48 * time.Hour)
	p := &twicestore.JobDeleteFinishedParams{CompletedBefore: later, DeadBefore: later, DiscardedBefore: later,
		CancelledBefore: later, Limit: 1000}
	if keepDead {
		p.DeadBefore = time.Time{}
	}
	if _, err := e.s.JobDeleteFinished(e.ctx, p); err != nil {
		e.t.Fatalf("JobDeleteFinished: %v", err)
	}
}

// pruneScan runs a whole pruning scan, limit rows a page, and returns the
// rows deleted and the pages it took.
func (e *env) pruneScan(limit int, prune func(after int64, limit int) (*twicestore.PruneScanResult, error)) (deleted, pages int) {
	e.t.Helper()
	var after int64
	for {
		res, err := prune(after, limit)
		if err != nil {
			e.t.Fatalf("prune after %d: %v", after, err)
		}
		deleted += res.Deleted
		pages++
		if res.Next == 0 {
			return deleted, pages
		}
		if res.Next <= after {
			e.t.Fatalf("prune after %d: Next = %d, want a higher id", after, res.Next)
		}
		after = res.Next
		if pages > 1000 {
			e.t.Fatal("prune scan does not end")
		}
	}
}

func (e *env) workflowPrune(limit int) (deleted, pages int) {
	e.t.Helper()
	return e.pruneScan(limit, func(after int64, limit int) (*twicestore.PruneScanResult, error) {
		return e.s.WorkflowPrune(e.ctx, &twicestore.WorkflowPruneParams{After: after, Limit: limit})
	})
}

func (e *env) batchPrune(limit int) (deleted, pages int) {
	e.t.Helper()
	return e.pruneScan(limit, func(after int64, limit int) (*twicestore.PruneScanResult, error) {
		return e.s.BatchPrune(e.ctx, &twicestore.BatchPruneParams{After: after, Limit: limit})
	})
}

// workflowKept fails the test unless the workflow is still there with all
// its tasks.
func (e *env) workflowKept(what string, id int64, tasks int) {
	e.t.Helper()
	g, err := e.s.WorkflowGet(e.ctx, &twicestore.WorkflowGetParams{ID: id})
	if err != nil {
		e.t.Fatalf("%s: WorkflowGet(%d): %v, want it kept", what, id, err)
	}
	if len(g.Tasks) != tasks {
		e.t.Fatalf("%s: %d tasks left, want %d: %s", what, len(g.Tasks), tasks, taskStates(g))
	}
}

func (e *env) workflowGone(what string, id int64) {
	e.t.Helper()
	if _, err := e.s.WorkflowGet(e.ctx, &twicestore.WorkflowGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
		e.t.Fatalf("%s: WorkflowGet(%d) = %v, want ErrNotFound", what, id, err)
	}
}

// testWorkflowPrune: a workflow goes, with its tasks and dependency rows,
// once no job of it is left; one with a job left in any state (and so
// tasks that may still be enqueued) stays. The scan pages by id, so a
// workflow kept at the front does not hide the ones behind it.
func testWorkflowPrune(t *testing.T, e *env) {
	running := e.workflow("", e.task("a"), e.task("b", "a")).Workflow.ID
	done := e.workflow("", e.task("a"), e.task("b", "a")).Workflow.ID
	halfway := e.workflow("", e.task("a"), e.task("b", "a")).Workflow.ID
	blocked := e.workflow(twicetype.WorkflowOnDeadHold, e.task("a"), e.task("b", "a")).Workflow.ID
	waiting := e.workflow("", e.task("a"), e.task("b", "a")).Workflow.ID
	failed := e.workflow(twicetype.WorkflowOnDeadCancel, e.task("a"), e.task("b", "a")).Workflow.ID

	e.runTask(done, "a", twicetype.JobStateCompleted)
	e.runTask(done, "b", twicetype.JobStateCompleted)
	e.runTask(halfway, "a", twicetype.JobStateCompleted) // b's job is available, a's will be deleted
	e.runTask(blocked, "a", twicetype.JobStateDead)      // b waits for a retry of a
	e.runTask(failed, "a", twicetype.JobStateDead)       // b is cancelled: the workflow failed
	for _, tk := range e.workflowGet(running).Tasks {
		if tk.Name == "a" {
			e.leaseID(tk.Job.ID) // a runs; b is not inserted yet
		}
	}

	e.deleteFinished(true)
	if n, pages := e.workflowPrune(1); n != 1 || pages != 7 {
		t.Fatalf("first pass deleted %d workflows in %d pages; want only the finished one, in 7 pages of 1", n, pages)
	}
	e.workflowGone("a workflow whose jobs all completed and were deleted", done)
	e.workflowKept("a workflow whose first task runs", running, 2)
	e.workflowKept("a workflow whose second task's job waits", halfway, 2)
	e.workflowKept("a blocked workflow whose dead task can still be retried", blocked, 2)
	e.workflowKept("a failed workflow whose dead task is kept", failed, 2)
	e.workflowKept("a workflow whose first task waits", waiting, 2)
	list, err := e.s.WorkflowList(e.ctx, &twicestore.WorkflowListParams{})
	if err != nil || len(list.Workflows) != 5 {
		t.Fatalf("WorkflowList after the prune: %v, %v; want the 5 kept", list, err)
	}

	// Once the dead jobs are deleted too, the blocked workflow can never
	// move again (its waiting task waited on a job that is gone): it goes,
	// as does the failed one.
	e.deleteFinished(false)
	if n, pages := e.workflowPrune(0); n != 2 || pages != 1 {
		t.Fatalf("second pass deleted %d workflows in %d pages, want the blocked and the failed one in one page (no Limit)", n, pages)
	}
	e.workflowGone("a blocked workflow whose dead job was deleted", blocked)
	e.workflowGone("a failed workflow whose jobs were deleted", failed)
	e.workflowKept("a workflow whose first task runs", running, 2)
	e.workflowKept("a workflow whose second task's job waits", halfway, 2)
	e.workflowKept("a workflow whose first task waits", waiting, 2)

	// A new workflow after a pruned one gets a new id, and a task of the
	// pruned one's jobs can never be confused with it.
	if again := e.workflow("", e.task("a")).Workflow.ID; again <= failed {
		t.Fatalf("a workflow inserted after the prune got id %d, not above the pruned %d", again, failed)
	}
}

func (e *env) batchKept(what string, id int64) {
	e.t.Helper()
	if _, err := e.s.BatchGet(e.ctx, &twicestore.BatchGetParams{ID: id}); err != nil {
		e.t.Fatalf("%s: BatchGet(%d): %v, want it kept", what, id, err)
	}
}

func (e *env) batchGone(what string, id int64) {
	e.t.Helper()
	if _, err := e.s.BatchGet(e.ctx, &twicestore.BatchGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
		e.t.Fatalf("%s: BatchGet(%d) = %v, want ErrNotFound", what, id, err)
	}
}

// finishID leases job id and finishes it in state.
func (e *env) finishID(id int64, state twicetype.JobState) {
	e.t.Helper()
	j := e.leaseID(id)
	o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: state, FinishedAt: e.at(time.Second)}
	if state == twicetype.JobStateDead {
		o.Error = &twicetype.AttemptError{Attempt: j.Attempt, At: e.base, Error: "boom"}
	}
	if !e.finish(o)[0] {
		e.t.Fatalf("finishing job %d not applied", id)
	}
}

// testBatchPrune: a sealed batch goes once none of its jobs is left and
// its callback job, if it got one, is gone too; a batch with a job left,
// or still open, stays.
func testBatchPrune(t *testing.T, e *env) {
	pending, _ := e.batch(false, false, 2)
	done, _ := e.batch(false, false, 2)
	callbackLeft, _ := e.batch(false, false, 1)
	failed, _ := e.batch(false, true, 1) // OnSuccess, its job dies: no callback, ever
	open, _ := e.batch(true, false, 1)   // its job completes, but more may be added
	emptyOpen, _ := e.batch(true, false, 0)

	e.finishID(pending.Jobs[0].Job.ID, twicetype.JobStateCompleted)
	for _, j := range done.Jobs {
		e.finishID(j.Job.ID, twicetype.JobStateCompleted)
	}
	e.finishID(e.batchGet(done.Batch.ID).CallbackJobID, twicetype.JobStateCompleted)
	e.finishID(callbackLeft.Jobs[0].Job.ID, twicetype.JobStateCompleted) // its callback stays available
	e.finishID(failed.Jobs[0].Job.ID, twicetype.JobStateDead)
	e.finishID(open.Jobs[0].Job.ID, twicetype.JobStateCompleted)

	e.deleteFinished(true)
	if n, pages := e.batchPrune(1); n != 1 || pages != 7 {
		t.Fatalf("first pass deleted %d batches in %d pages; want only the finished one, in 7 pages of 1", n, pages)
	}
	e.batchGone("a batch whose jobs and callback completed and were deleted", done.Batch.ID)
	e.batchKept("a batch with a job pending", pending.Batch.ID)
	e.batchKept("a batch whose callback has not run", callbackLeft.Batch.ID)
	e.batchKept("a failed batch whose dead job is kept", failed.Batch.ID)
	e.batchKept("an open batch", open.Batch.ID)
	e.batchKept("an open batch with no job yet", emptyOpen.Batch.ID)

	e.deleteFinished(false)
	if n, pages := e.batchPrune(0); n != 1 || pages != 1 {
		t.Fatalf("second pass deleted %d batches in %d pages, want the failed one in one page (no Limit)", n, pages)
	}
	e.batchGone("a failed batch whose dead job was deleted", failed.Batch.ID)
	e.batchKept("an open batch", open.Batch.ID)
	e.batchKept("a batch with a job pending", pending.Batch.ID)
}

// testToggleHistoryPrune: history rows changed before Before go, oldest
// first and Limit at a time, except the newest of each kind, which says
// who set the switch as it stands.
func testToggleHistoryPrune(t *testing.T, e *env) {
	set := func(kind string, at time.Duration) {
		e.setToggle(e.s, twicetype.Toggle{Kind: kind, Enabled: false, Reason: "r", By: "ops", At: e.at(at)})
	}
	set("storetest.a.v1", -3*time.Hour)
	set("storetest.a.v1", -2*time.Hour)
	set("storetest.a.v1", -time.Hour)
	set("storetest.b.v1", -3*time.Hour) // old, but b's newest
	set("storetest.c.v1", -4*time.Hour)
	set("storetest.c.v1", 0) // recent
	prune := func(before time.Time, limit int) int {
		t.Helper()
		res, err := e.s.ToggleHistoryPrune(e.ctx, &twicestore.ToggleHistoryPruneParams{Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("ToggleHistoryPrune: %v", err)
		}
		return res.Deleted
	}
	if n := prune(time.Time{}, 0); n != 0 {
		t.Fatalf("a zero Before deleted %d rows", n)
	}
	if n := prune(e.at(-30*time.Minute), 1); n != 1 {
		t.Fatalf("Limit 1 deleted %d rows", n)
	}
	if got := e.history(e.s, "storetest.a.v1", 0, 0); len(got) != 2 || !got[1].At.Equal(e.at(-2*time.Hour)) {
		t.Fatalf("after one row went, a's history:\n%s want the oldest gone", fmtHistory(got))
	}
	if n := prune(e.at(-30*time.Minute), 0); n != 2 {
		t.Fatalf("the rest deleted %d rows, want a's -2h and c's -4h", n)
	}
	if n := prune(e.at(-30*time.Minute), 0); n != 0 {
		t.Fatalf("a second prune deleted %d rows", n)
	}
	got := e.history(e.s, "", 0, 0)
	want := []string{"storetest.c.v1", "storetest.b.v1", "storetest.a.v1"} // newest first
	if len(got) != len(want) {
		t.Fatalf("history left:\n%s want each kind's newest change", fmtHistory(got))
	}
	for i, k := range want {
		if got[i].Kind != k {
			t.Fatalf("history left:\n%s want each kind's newest change", fmtHistory(got))
		}
	}
}

// testNodePrune: a node whose last heartbeat is older than the bound
// goes; one that heartbeats, or stopped recently, stays.
func testNodePrune(t *testing.T, e *env) {
	for id, hb := range map[string]time.Duration{"node-live": -10 * time.Second, "node-recent": -10 * time.Minute,
		"node-dead": -48 * time.Hour, "node-long-dead": -480 * time.Hour} {
		e.heartbeat(&twicetype.Node{ID: id, Host: "h", StartedAt: e.at(hb - time.Hour), HeartbeatAt: e.at(hb)})
	}
	prune := func(before time.Time, limit int) int {
		t.Helper()
		res, err := e.s.NodePrune(e.ctx, &twicestore.NodePruneParams{HeartbeatBefore: before, Limit: limit})
		if err != nil {
			t.Fatalf("NodePrune: %v", err)
		}
		return res.Deleted
	}
	if n := prune(time.Time{}, 0); n != 0 {
		t.Fatalf("a zero HeartbeatBefore deleted %d nodes", n)
	}
	if n := prune(e.at(-24*time.Hour), 1); n != 1 {
		t.Fatalf("Limit 1 deleted %d nodes", n)
	}
	if n := prune(e.at(-24*time.Hour), 0); n != 1 {
		t.Fatalf("the rest deleted %d nodes, want 1", n)
	}
	var ids []string
	for _, n := range e.nodes(time.Time{}) {
		ids = append(ids, n.ID)
	}
	if len(ids) != 2 || ids[0] != "node-live" || ids[1] != "node-recent" {
		t.Fatalf("nodes left: %v, want node-live and node-recent", ids)
	}
}
