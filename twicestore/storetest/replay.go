package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var replayTests = []test{
	{"Classes", testReplayClasses},
	{"CompletedOnAsk", testReplayCompleted},
	{"PagesAndFilters", testReplayPages},
	{"HistoryAppend", testReplayHistory},
	{"RetryCompletedOnAsk", testReplayRetryCompleted},
	{"CompletedComposedRefused", testReplayComposedRefused},
}

// replayKinds are the kinds the replay checks preview, with handler names
// that differ from the kinds, so a driver that joins on the kind is caught.
var replayKinds = map[string]twicestore.ReplayKind{
	"replay.after.v1":  {Handler: "h.after", Strategy: "claim-after"},
	"replay.before.v1": {Handler: "h.before", Strategy: "claim-before"},
	"replay.none.v1":   {Handler: "h.none", Strategy: "none"},
}

// deadJob inserts a job of kind (edited by edit, if set), fetches it, calls
// during with the running job, and dead-letters it.
func (e *env) deadJob(kind string, edit func(*twicestore.JobInsertParams), during func(*twicetype.JobRow)) *twicetype.JobRow {
	e.t.Helper()
	p := e.job(kind)
	if edit != nil {
		edit(p)
	}
	e.insertOne(p)
	j := e.fetchOne(e.base, kind)
	if during != nil {
		during(j)
	}
	if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead,
		FinishedAt: e.base, Error: &twicetype.AttemptError{Attempt: j.Attempt, At: e.base, Error: "boom"}}); !applied[0] {
		e.t.Fatalf("dead-lettering job %d was not applied", j.ID)
	}
	return e.get(j.ID)
}

func (e *env) preview(p *twicestore.JobRetryPreviewParams) []twicestore.ReplayJob {
	e.t.Helper()
	res, err := e.s.JobRetryPreview(e.ctx, p)
	if err != nil {
		e.t.Fatalf("JobRetryPreview: %v", err)
	}
	return res.Jobs
}

func (e *env) stepClaim(j *twicetype.JobRow, handler, step string, done bool) {
	e.t.Helper()
	p := &twicestore.StepParams{Handler: handler, Key: j.Key, Step: step, Strategy: "claim-after",
		JobID: j.ID, Epoch: j.Epoch, Done: done, Now: e.base}
	if done {
		p.Receipt = []byte(`"r-1"`)
	}
	if res, err := e.s.StepClaim(e.ctx, p); err != nil || !res.Claimed {
		e.t.Fatalf("StepClaim(%s) = %+v, %v", step, res, err)
	}
}

// testReplayClasses: each class is told from the marker under the kind's
// handler, the claimant of a ClaimBefore claim, the steps' receipts and
// the holder of the unique key, and the preview writes nothing.
func testReplayClasses(t *testing.T, e *env) {
	claimBy := func(handler string, jobID, epoch int64) func(*twicetype.JobRow) {
		return func(j *twicetype.JobRow) {
			if _, err := e.s.MarkerClaim(e.ctx, &twicestore.MarkerParams{Handler: handler, Key: j.Key, Now: e.base,
				JobID: jobID, Epoch: epoch}); err != nil {
				t.Fatalf("MarkerClaim: %v", err)
			}
		}
	}
	absorbed := e.deadJob("replay.after.v1", nil, nil)
	e.claim("h.after", absorbed.Key, e.base)
	fresh := e.deadJob("replay.after.v1", nil, nil)
	wrongHandler := e.deadJob("replay.after.v1", nil, nil)
	e.claim("replay.after.v1", wrongHandler.Key, e.base) // the kind's name, not its handler's: no marker
	var uncertain, duplicate *twicetype.JobRow
	uncertain = e.deadJob("replay.before.v1", nil, func(j *twicetype.JobRow) { claimBy("h.before", j.ID, j.Epoch)(j) })
	duplicate = e.deadJob("replay.before.v1", nil, func(j *twicetype.JobRow) { claimBy("h.before", j.ID+1000, 1)(j) })
	none := e.deadJob("replay.none.v1", nil, nil)
	e.claim("h.none", none.Key, e.base) // None keeps no marker: whatever is there, it runs
	openStep := e.deadJob("replay.after.v1", nil, func(j *twicetype.JobRow) {
		e.stepClaim(j, "h.after", "charge", true)
		e.stepClaim(j, "h.after", "email", false)
	})
	doneSteps := e.deadJob("replay.after.v1", nil, func(j *twicetype.JobRow) { e.stepClaim(j, "h.after", "charge", true) })
	unknown := e.deadJob("replay.unknown.v1", nil, nil)
	e.claim("replay.unknown.v1", unknown.Key, e.base) // a kind not named: its handler is the kind
	blocked := e.deadJob("replay.after.v1", func(p *twicestore.JobInsertParams) { p.UniqueKey = "u-1" }, nil)
	e.claim("h.after", blocked.Key, e.base) // blocked wins over no-op: the retry would not happen
	holder := e.insertOne(func() *twicestore.JobInsertParams {
		p := e.job("replay.after.v1")
		p.UniqueKey, p.RunAt = "u-1", e.at(time.Hour)
		return p
	}())

	got := e.preview(&twicestore.JobRetryPreviewParams{Kinds: replayKinds})
	want := map[int64]twicestore.ReplayClass{
		absorbed.ID: twicestore.ReplayNoop, fresh.ID: twicestore.ReplayWillRun, wrongHandler.ID: twicestore.ReplayWillRun,
		uncertain.ID: twicestore.ReplayUncertain, duplicate.ID: twicestore.ReplayNoop, none.ID: twicestore.ReplayWillRun,
		openStep.ID: twicestore.ReplayUncertain, doneSteps.ID: twicestore.ReplayWillRun, unknown.ID: twicestore.ReplayNoop,
		blocked.ID: twicestore.ReplayBlocked,
	}
	if len(got) != len(want) {
		t.Fatalf("preview = %+v, want %d jobs (the holder %d is available: no retry takes it)", got, len(want), holder.ID)
	}
	for i, j := range got {
		if i > 0 && got[i-1].ID >= j.ID {
			t.Errorf("preview not in ascending id order at %d: %d after %d", i, j.ID, got[i-1].ID)
		}
		if j.Class != want[j.ID] {
			t.Errorf("job %d (%s) is %q, want %q (%+v)", j.ID, j.Kind, j.Class, want[j.ID], j)
		}
		if j.State != twicetype.JobStateDead {
			t.Errorf("job %d state %q, want dead", j.ID, j.State)
		}
		switch j.ID {
		case openStep.ID:
			if j.StepsOpen != 1 || j.StepsDone != 1 {
				t.Errorf("job %d steps open %d done %d, want 1 and 1", j.ID, j.StepsOpen, j.StepsDone)
			}
		case blocked.ID:
			if j.HolderID != holder.ID || j.UniqueKey != "u-1" {
				t.Errorf("blocked job: holder %d key %q, want %d u-1", j.HolderID, j.UniqueKey, holder.ID)
			}
		case uncertain.ID:
			if !j.Marker || j.MarkerJobID != uncertain.ID {
				t.Errorf("uncertain job: marker %v by %d, want its own claim", j.Marker, j.MarkerJobID)
			}
		}
	}
	if s := e.get(fresh.ID).State; s != twicetype.JobStateDead {
		t.Errorf("after a preview, job %d is %s: a preview must write nothing", fresh.ID, s)
	}
}

// testReplayCompleted: completed jobs are previewed only when asked for.
func testReplayCompleted(t *testing.T, e *env) {
	ins := e.insertOne(e.job("replay.after.v1"))
	done := e.fetchOne(e.base, ins.Kind)
	e.complete(done, e.base)
	e.claim("h.after", done.Key, e.base)
	dead := e.deadJob("replay.after.v1", nil, nil)
	ids := func(js []twicestore.ReplayJob) []int64 {
		var out []int64
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if got := ids(e.preview(&twicestore.JobRetryPreviewParams{Kinds: replayKinds})); !slices.Equal(got, []int64{dead.ID}) {
		t.Errorf("preview without Completed = %v, want only the dead job %d", got, dead.ID)
	}
	got := e.preview(&twicestore.JobRetryPreviewParams{Kinds: replayKinds, Completed: true,
		Filter: twicestore.JobFilter{State: twicetype.JobStateCompleted}})
	if len(got) != 1 || got[0].ID != done.ID || got[0].Class != twicestore.ReplayNoop || got[0].State != twicetype.JobStateCompleted {
		t.Errorf("preview of completed jobs = %+v, want job %d, a no-op", got, done.ID)
	}
}

// testReplayPages: AfterID and Limit page through the preview in id order,
// and the job filter applies as it does to JobRetry.
func testReplayPages(t *testing.T, e *env) {
	var all []int64
	for range 5 {
		all = append(all, e.deadJob("replay.after.v1", nil, nil).ID)
	}
	other := e.deadJob("replay.none.v1", nil, nil)
	var got []int64
	for after := int64(0); ; {
		page := e.preview(&twicestore.JobRetryPreviewParams{Kinds: replayKinds, AfterID: after, Limit: 2,
			Filter: twicestore.JobFilter{Kind: "replay.after.v1"}})
		if len(page) > 2 {
			t.Fatalf("page of %d jobs, want at most 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			got = append(got, j.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(got, all) {
		t.Errorf("paged preview = %v, want %v (job %d is of another kind)", got, all, other.ID)
	}
	if n := len(e.preview(&twicestore.JobRetryPreviewParams{Filter: twicestore.JobFilter{IDs: []int64{other.ID, all[0]}}})); n != 2 {
		t.Errorf("preview by ids = %d jobs, want 2", n)
	}
	if _, err := e.s.JobRetryPreview(e.ctx, &twicestore.JobRetryPreviewParams{
		Kinds: map[string]twicestore.ReplayKind{"x.v1": {Strategy: "sometimes"}}}); err == nil {
		t.Error("a preview naming an unknown strategy succeeded")
	}
}

// testReplayHistory: JobHistoryAppend adds its entry after the job's
// errors, to each job named, and skips an id that names no job.
func testReplayHistory(t *testing.T, e *env) {
	a := e.kill(e.insertOne(e.job("replay.after.v1")).Kind, e.base)
	b := e.deadJob("replay.after.v1", nil, nil)
	entry := twicetype.AttemptError{At: e.at(time.Minute), Error: "retried by ops@host despite an uncertain effect: checked"}
	if err := e.s.JobHistoryAppend(e.ctx, &twicestore.JobHistoryAppendParams{IDs: []int64{a.ID, b.ID, 999999}, Entry: entry}); err != nil {
		t.Fatalf("JobHistoryAppend: %v", err)
	}
	for _, j := range []*twicetype.JobRow{a, b} {
		got := e.get(j.ID).Errors
		if len(got) != len(j.Errors)+1 || got[len(got)-1].Error != entry.Error || !got[len(got)-1].At.Equal(entry.At) {
			t.Errorf("job %d errors after an append = %+v, want %d with the entry last", j.ID, got, len(j.Errors)+1)
		}
	}
}

// completedJob inserts p, fetches it and completes it.
func (e *env) completedJob(p *twicestore.JobInsertParams) *twicetype.JobRow {
	e.t.Helper()
	ins := e.insertOne(p)
	e.complete(e.leaseID(ins.ID), e.base)
	return e.get(ins.ID)
}

// testReplayRetryCompleted: JobRetry takes a completed job only with
// Completed, whether named by id or matched by a filter; replayed, it is
// available with its attempts reset, its epoch kept, and a completed job
// holding its own unique key takes it back without conflicting with
// itself, while one whose key another job holds is left.
func testReplayRetryCompleted(t *testing.T, e *env) {
	plain := e.completedJob(e.job("replay.after.v1"))
	own := e.completedJob(e.uniqueIn("replay.after.v1", "own", twicetype.JobStateCompleted))
	heldElsewhere := e.completedJob(e.uniqueJob("replay.after.v1", "taken"))
	holder := e.insertOne(func() *twicestore.JobInsertParams {
		p := e.uniqueJob("replay.after.v1", "taken")
		p.RunAt = e.at(time.Hour)
		return p
	}())
	byID := twicestore.JobFilter{IDs: []int64{plain.ID, own.ID}}
	res := e.retryResults(&twicestore.JobBulkParams{Filter: byID, Now: e.at(time.Minute)})
	for _, r := range res.Results {
		if r.Status != twicestore.JobActionWrongState || r.State != twicetype.JobStateCompleted {
			t.Errorf("retry without Completed: job %d %s (%s), want wrong_state, completed", r.ID, r.Status, r.State)
		}
	}
	completed := twicestore.JobFilter{State: twicetype.JobStateCompleted}
	if ids := e.retry(&twicestore.JobBulkParams{Filter: completed, Now: e.at(time.Minute)}); len(ids) != 0 {
		t.Fatalf("retry of state completed without Completed retried %v", ids)
	}
	res = e.retryResults(&twicestore.JobBulkParams{Filter: completed, Now: e.at(time.Minute), Completed: true})
	want := map[int64]twicestore.JobActionStatus{plain.ID: twicestore.JobActionDone, own.ID: twicestore.JobActionDone,
		heldElsewhere.ID: twicestore.JobActionConflict}
	if len(res.Results) != len(want) {
		t.Fatalf("retry with Completed: %+v, want %d results", res.Results, len(want))
	}
	for _, r := range res.Results {
		if r.Status != want[r.ID] {
			t.Errorf("retry with Completed: job %d %s, want %s", r.ID, r.Status, want[r.ID])
		}
		if r.ID == heldElsewhere.ID && (r.HolderID != holder.ID || r.State != twicetype.JobStateCompleted) {
			t.Errorf("held job: holder %d state %s, want %d completed", r.HolderID, r.State, holder.ID)
		}
	}
	for _, j := range []*twicetype.JobRow{plain, own} {
		got := e.get(j.ID)
		if got.State != twicetype.JobStateAvailable || got.Attempt != 0 || got.Epoch != j.Epoch || !got.RunAt.Equal(e.at(time.Minute)) {
			t.Errorf("replayed job %d: state %s attempt %d epoch %d run at %s, want available, 0, %d, %s",
				j.ID, got.State, got.Attempt, got.Epoch, got.RunAt, j.Epoch, e.at(time.Minute))
		}
	}
	// The replayed job holds its key again: a new job with it is a
	// duplicate.
	if r := e.insert(e.uniqueIn("replay.after.v1", "own", twicetype.JobStateCompleted))[0]; !r.Duplicate || r.Job.ID != own.ID {
		t.Errorf("insert with the replayed job's key = %+v, want a duplicate of job %d", r, own.ID)
	}
}

// testReplayComposedRefused: a completed workflow task and a completed
// batch member are previewed as refused, with their workflow, task and
// batch, and a retry with Completed leaves them and their workflow's and
// batch's counters as they were; the same jobs dead are retried.
func testReplayComposedRefused(t *testing.T, e *env) {
	wf := e.workflow("hold", e.task("a"), e.task("b", "a"))
	task := e.runTask(wf.Workflow.ID, "a", twicetype.JobStateCompleted)
	b, _ := e.batch(false, false, 2)
	members := e.fetch(e.base, 10, "node-a", "storetest.member.v1")
	if len(members) != 2 {
		t.Fatalf("fetched %d batch members, want 2", len(members))
	}
	e.complete(members[0], e.base)
	wfBefore, batchBefore := taskStates(e.workflowGet(wf.Workflow.ID)), batchCounts(e.batchGet(b.Batch.ID))

	completed := twicestore.JobFilter{State: twicetype.JobStateCompleted}
	got := e.preview(&twicestore.JobRetryPreviewParams{Filter: completed, Completed: true})
	if len(got) != 2 {
		t.Fatalf("preview of completed jobs = %+v, want the task and the member", got)
	}
	for _, j := range got {
		if j.Class != twicestore.ReplayRefused {
			t.Errorf("job %d is %q, want refused (%+v)", j.ID, j.Class, j)
		}
		switch j.ID {
		case task.ID:
			if j.WorkflowID != wf.Workflow.ID || j.WorkflowTask != "a" || j.BatchID != 0 {
				t.Errorf("task: workflow %d task %q batch %d, want %d a 0", j.WorkflowID, j.WorkflowTask, j.BatchID, wf.Workflow.ID)
			}
		case members[0].ID:
			if j.BatchID != b.Batch.ID || j.WorkflowID != 0 {
				t.Errorf("member: batch %d workflow %d, want %d 0", j.BatchID, j.WorkflowID, b.Batch.ID)
			}
		default:
			t.Errorf("preview read job %d, neither the task %d nor the member %d", j.ID, task.ID, members[0].ID)
		}
	}
	res := e.retryResults(&twicestore.JobBulkParams{Filter: completed, Now: e.at(time.Minute), Completed: true})
	if len(res.IDs) != 0 || len(res.Results) != 2 {
		t.Fatalf("retry of completed composed jobs = %+v, want 2 refused", res)
	}
	for _, r := range res.Results {
		if r.Status != twicestore.JobActionComposed || r.State != twicetype.JobStateCompleted {
			t.Errorf("job %d: %s (%s), want composed, completed", r.ID, r.Status, r.State)
		}
	}
	if got := taskStates(e.workflowGet(wf.Workflow.ID)); got != wfBefore {
		t.Errorf("workflow after a refused replay: %s, want %s", got, wfBefore)
	}
	if got := batchCounts(e.batchGet(b.Batch.ID)); got != batchBefore {
		t.Errorf("batch after a refused replay: %s, want %s", got, batchBefore)
	}
	// Dead, a batch member is retried as before: only a completion fired
	// edges that a retry would fire again.
	e.finish(&twicestore.JobOutcome{ID: members[1].ID, Epoch: members[1].Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
		Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
	if ids := e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{members[1].ID}}, Now: e.at(time.Minute),
		Completed: true}); len(ids) != 1 {
		t.Errorf("retry of a dead batch member retried %v, want it", ids)
	}
}
