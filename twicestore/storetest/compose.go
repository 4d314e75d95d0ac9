package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// composeTests check that every edge (continuation, workflow dependency,
// batch callback) fires with the write that finishes its parent, exactly
// once, whatever else writes the same job.
var composeTests = []test{
	{"ContinuationWithCompletion", testContinuationWithCompletion},
	{"ContinuationFencedOrFailedInsertsNothing", testContinuationFenced},
	{"ContinuationFollowsMarkerClaim", testContinuationMarker},
	{"ContinuationRolledBackWithTx", testContinuationTx},
	{"WorkflowFanOutFanIn", testWorkflowFanOutFanIn},
	{"WorkflowHoldOnDead", testWorkflowHold},
	{"WorkflowCancelPolicy", testWorkflowCancelPolicy},
	{"WorkflowCancel", testWorkflowCancel},
	{"WorkflowListPages", testWorkflowListPages},
	{"WorkflowRescuedDead", testWorkflowRescuedDead},
	{"WorkflowTaskRunAt", testWorkflowTaskRunAt},
	{"BatchCallbackOnce", testBatchCallbackOnce},
	{"BatchOnSuccess", testBatchOnSuccess},
	{"BatchOpenAddSeal", testBatchOpen},
	{"BatchFailedFinishes", testBatchFailedFinishes},
	{"BatchListPages", testBatchList},
	{"JobLinks", testJobLinks},
}

// kindIDs lists the ids of the jobs of kind, ascending.
func (e *env) kindIDs(kind string) []int64 {
	e.t.Helper()
	return sorted(e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}, Limit: 1000}))
}

func (e *env) completeWith(j *twicetype.JobRow, at time.Time, children ...*twicestore.JobInsertParams) bool {
	e.t.Helper()
	return e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted,
		FinishedAt: at, Children: children})[0]
}

func testContinuationWithCompletion(t *testing.T, e *env) {
	const parent, child = "storetest.parent.v1", "storetest.child.v1"
	e.insertOne(e.job(parent))
	j := e.fetchOne(e.base, parent)
	c1, c2 := e.job(child), e.job(child)
	res, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Second), Children: []*twicestore.JobInsertParams{c1, c2}}}})
	if err != nil || !res.Applied[0] {
		t.Fatalf("completion not applied: %v", err)
	}
	if !res.Inserted {
		t.Fatal("a completion that inserted continuations did not report Inserted")
	}
	kids := e.kindIDs(child)
	if len(kids) != 2 {
		t.Fatalf("children after the completion: %v, want 2", kids)
	}
	listed, err := e.s.JobChildren(e.ctx, &twicestore.JobChildrenParams{ParentID: j.ID})
	if err != nil || !slices.Equal(ids(listed), kids) {
		t.Fatalf("JobChildren(%d) = %v, %v; want %v", j.ID, ids(listed), err, kids)
	}
	for _, id := range kids {
		if got := e.get(id); got.State != twicetype.JobStateAvailable || got.Key != c1.Key && got.Key != c2.Key {
			t.Errorf("child %d: state %s key %q, want available with its own key", id, got.State, got.Key)
		}
	}
	// A redelivered completion of the same attempt changes nothing.
	if e.completeWith(j, e.at(2*time.Second), e.job(child)) {
		t.Fatal("a second completion of the same epoch was applied")
	}
	if kids := e.kindIDs(child); len(kids) != 2 {
		t.Fatalf("children after a repeated completion: %v, want still 2", kids)
	}
}

func testContinuationFenced(t *testing.T, e *env) {
	const parent, child = "storetest.parent.v1", "storetest.child.v1"
	e.insertOne(e.job(parent))
	old := e.fetchOne(e.base, parent)
	// A retry and a dead letter carry no children, whatever they hold.
	if !e.finish(&twicestore.JobOutcome{ID: old.ID, Epoch: old.Epoch, State: twicetype.JobStateAvailable,
		RunAt: e.base, Children: []*twicestore.JobInsertParams{e.job(child)}})[0] {
		t.Fatal("retry not applied")
	}
	if kids := e.kindIDs(child); len(kids) != 0 {
		t.Fatalf("a retried attempt inserted children %v", kids)
	}
	old = e.fetchOne(e.base, parent)
	e.rescue(e.at(2*time.Minute), 0) // the lease expired
	cur := e.fetchOne(e.at(2*time.Minute), parent)
	if e.completeWith(old, e.at(3*time.Minute), e.job(child)) {
		t.Fatal("the fenced holder's completion was applied")
	}
	if kids := e.kindIDs(child); len(kids) != 0 {
		t.Fatalf("a fenced attempt inserted children %v", kids)
	}
	if !e.completeWith(cur, e.at(3*time.Minute), e.job(child)) {
		t.Fatal("the current holder's completion was not applied")
	}
	if kids := e.kindIDs(child); len(kids) != 1 {
		t.Fatalf("children after the current holder completed: %v, want 1", kids)
	}

	const dead = "storetest.parentdead.v1"
	e.insertOne(e.job(dead))
	d := e.fetchOne(e.base, dead)
	if !e.finish(&twicestore.JobOutcome{ID: d.ID, Epoch: d.Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
		Error:    &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"},
		Children: []*twicestore.JobInsertParams{e.job(child)}})[0] {
		t.Fatal("dead letter not applied")
	}
	if kids := e.kindIDs(child); len(kids) != 1 {
		t.Fatalf("a dead attempt inserted children: %v, want still 1", kids)
	}
}

// testContinuationMarker: an outcome that claims a marker earns its
// children by its claim. A holder whose lease was lost but whose effect
// happened (its claim is the stored one) inserts them; the next holder,
// whose claim finds the marker, does not, though its completion applies.
func testContinuationMarker(t *testing.T, e *env) {
	const parent, child = "storetest.parent.v1", "storetest.child.v1"
	p := e.job(parent)
	e.insertOne(p)
	old := e.fetchOne(e.base, parent)
	e.rescue(e.at(2*time.Minute), 0)
	cur := e.fetchOne(e.at(2*time.Minute), parent)
	marker := func() *twicestore.MarkerParams { return &twicestore.MarkerParams{Handler: "h", Key: p.Key} }
	if e.finish(&twicestore.JobOutcome{ID: old.ID, Epoch: old.Epoch, State: twicetype.JobStateCompleted,
		FinishedAt: e.at(3 * time.Minute), Marker: marker(), Children: []*twicestore.JobInsertParams{e.job(child)}})[0] {
		t.Fatal("the fenced holder's completion was applied")
	}
	if kids := e.kindIDs(child); len(kids) != 1 {
		t.Fatalf("children after the fenced holder claimed the marker: %v, want 1", kids)
	}
	if !e.finish(&twicestore.JobOutcome{ID: cur.ID, Epoch: cur.Epoch, State: twicetype.JobStateCompleted,
		FinishedAt: e.at(3 * time.Minute), Marker: marker(), Children: []*twicestore.JobInsertParams{e.job(child)}})[0] {
		t.Fatal("the current holder's completion was not applied")
	}
	if kids := e.kindIDs(child); len(kids) != 1 {
		t.Fatalf("children after the second claim of the marker: %v, want still 1", kids)
	}
}

func testContinuationTx(t *testing.T, e *env) {
	const parent, child = "storetest.parent.v1", "storetest.child.v1"
	e.insertOne(e.job(parent))
	j := e.fetchOne(e.base, parent)
	for _, commit := range []bool{false, true} {
		tx, err := e.s.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tx.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
			ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.base,
			Children: []*twicestore.JobInsertParams{e.job(child)}}}})
		if err != nil || !res.Applied[0] {
			t.Fatalf("JobFinish in a transaction: %v, %v", res, err)
		}
		if commit {
			err = tx.Commit(e.ctx)
		} else {
			err = tx.Rollback(e.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if commit {
			want = 1
		}
		if kids := e.kindIDs(child); len(kids) != want {
			t.Fatalf("commit=%v: children %v, want %d", commit, kids, want)
		}
	}
}

// task builds one workflow task of kind "storetest.task.v1".
func (e *env) task(name string, deps ...string) *twicestore.WorkflowTaskParams {
	j := e.job("storetest.task.v1")
	j.Args = fmt.Appendf(nil, `{"task":%q}`, name)
	return &twicestore.WorkflowTaskParams{Name: name, Deps: deps, Job: j}
}

func (e *env) workflow(onDead string, tasks ...*twicestore.WorkflowTaskParams) *twicestore.WorkflowInsertResult {
	e.t.Helper()
	res, err := e.s.WorkflowInsert(e.ctx, &twicestore.WorkflowInsertParams{Name: "wf", OnDead: onDead, Tasks: tasks, CreatedAt: e.base})
	if err != nil {
		e.t.Fatalf("WorkflowInsert: %v", err)
	}
	return res
}

// taskAt is task with its job's own RunAt (and a kind of its own).
func (e *env) taskAt(runAt time.Time, name string, deps ...string) *twicestore.WorkflowTaskParams {
	t := e.task(name, deps...)
	t.Job.Kind, t.Job.RunAt = "storetest.task."+name+".v1", runAt
	return t
}

func (e *env) workflowGet(id int64) *twicestore.WorkflowGetResult {
	e.t.Helper()
	res, err := e.s.WorkflowGet(e.ctx, &twicestore.WorkflowGetParams{ID: id})
	if err != nil {
		e.t.Fatalf("WorkflowGet: %v", err)
	}
	return res
}

// taskStates renders each task as name=state, the job's state once it
// has one.
func taskStates(g *twicestore.WorkflowGetResult) string {
	s := ""
	for _, t := range g.Tasks {
		st := string(t.State)
		if t.Job != nil {
			st = string(t.Job.State)
		}
		s += fmt.Sprintf("%s=%s ", t.Name, st)
	}
	return s
}

// runTask fetches the due task job named name and finishes it in state.
func (e *env) runTask(wf int64, name string, state twicetype.JobState) *twicetype.JobRow {
	e.t.Helper()
	for _, t := range e.workflowGet(wf).Tasks {
		if t.Name != name {
			continue
		}
		if t.Job == nil || t.Job.State != twicetype.JobStateAvailable {
			e.t.Fatalf("task %s is not available: %+v", name, t)
		}
		j := e.leaseID(t.Job.ID)
		o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: state, FinishedAt: e.at(time.Second)}
		if state == twicetype.JobStateDead {
			o.Error = &twicetype.AttemptError{Attempt: j.Attempt, At: e.base, Error: "boom"}
		}
		if !e.finish(o)[0] {
			e.t.Fatalf("finishing task %s not applied", name)
		}
		return j
	}
	e.t.Fatalf("no task %s", name)
	return nil
}

// leaseID fetches until it leases job id (the others fetched go back).
func (e *env) leaseID(id int64) *twicetype.JobRow {
	e.t.Helper()
	jobs := e.fetch(e.at(time.Hour), 1000, "node-a", e.get(id).Kind)
	var got *twicetype.JobRow
	var back []*twicestore.JobOutcome
	for _, j := range jobs {
		if j.ID == id {
			got = j
			continue
		}
		back = append(back, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
			RunAt: e.base, RefundAttempt: true})
	}
	if len(back) > 0 {
		e.finish(back...)
	}
	if got == nil {
		e.t.Fatalf("job %d was not fetched", id)
	}
	return got
}

func testWorkflowFanOutFanIn(t *testing.T, e *env) {
	res := e.workflow("", e.task("a"), e.task("b", "a"), e.task("c", "a"), e.task("d", "b", "c"))
	wf := res.Workflow.ID
	if len(res.Jobs) != 1 || res.Workflow.Tasks != 4 || res.Workflow.State != twicetype.WorkflowRunning {
		t.Fatalf("insert: %d root jobs, workflow %+v; want 1 root, 4 tasks, running", len(res.Jobs), res.Workflow)
	}
	steps := []struct {
		run, want string
	}{
		{"", "a=available b=waiting c=waiting d=waiting "},
		{"a", "a=completed b=available c=available d=waiting "},
		{"b", "a=completed b=completed c=available d=waiting "},
		{"c", "a=completed b=completed c=completed d=available "},
		{"d", "a=completed b=completed c=completed d=completed "},
	}
	for _, s := range steps {
		if s.run != "" {
			e.runTask(wf, s.run, twicetype.JobStateCompleted)
		}
		if got := taskStates(e.workflowGet(wf)); got != s.want {
			t.Fatalf("after %q: %s, want %s", s.run, got, s.want)
		}
	}
	g := e.workflowGet(wf)
	if g.Workflow.State != twicetype.WorkflowCompleted || g.Workflow.Completed != 4 || g.Workflow.FinishedAt.IsZero() {
		t.Fatalf("workflow at the end: %+v, want completed 4", g.Workflow)
	}
	if d := g.Tasks[3]; !slices.Equal(d.Deps, []string{"b", "c"}) {
		t.Fatalf("d's deps = %v", d.Deps)
	}
	if n := len(e.kindIDs("storetest.task.v1")); n != 4 {
		t.Fatalf("%d task jobs, want one per task: 4", n)
	}
	var byName = map[string]int64{}
	for _, tk := range g.Tasks {
		byName[tk.Name] = tk.Job.ID
	}
	of, err := e.s.WorkflowTaskOf(e.ctx, &twicestore.WorkflowTaskOfParams{JobID: byName["d"]})
	if err != nil || of.WorkflowID != wf || of.Task != "d" || len(of.Deps) != 2 || of.Deps["b"] != byName["b"] || of.Deps["c"] != byName["c"] {
		t.Fatalf("WorkflowTaskOf(d) = %+v, %v; want workflow %d, deps b=%d c=%d", of, err, wf, byName["b"], byName["c"])
	}
	if _, err := e.s.WorkflowTaskOf(e.ctx, &twicestore.WorkflowTaskOfParams{JobID: e.insertOne(e.job("storetest.plain.v1")).ID}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("WorkflowTaskOf of a plain job: %v, want ErrNotFound", err)
	}
}

func testWorkflowHold(t *testing.T, e *env) {
	wf := e.workflow(twicetype.WorkflowOnDeadHold, e.task("a"), e.task("b", "a")).Workflow.ID
	a := e.runTask(wf, "a", twicetype.JobStateDead)
	g := e.workflowGet(wf)
	if !g.Workflow.Blocked() || taskStates(g) != "a=dead b=waiting " {
		t.Fatalf("after a died: %+v %s, want blocked, b waiting", g.Workflow, taskStates(g))
	}
	e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{a.ID}}, Now: e.base})
	if g := e.workflowGet(wf); g.Workflow.Blocked() {
		t.Fatalf("after a's retry: %+v, want no longer blocked", g.Workflow)
	}
	e.runTask(wf, "a", twicetype.JobStateCompleted)
	if got := taskStates(e.workflowGet(wf)); got != "a=completed b=available " {
		t.Fatalf("after a's retry completed: %s", got)
	}
}

func testWorkflowCancelPolicy(t *testing.T, e *env) {
	wf := e.workflow(twicetype.WorkflowOnDeadCancel, e.task("a"), e.task("x"),
		e.task("b", "a"), e.task("c", "b"), e.task("y", "x")).Workflow.ID
	e.runTask(wf, "a", twicetype.JobStateDead)
	g := e.workflowGet(wf)
	if got := taskStates(g); got != "a=dead b=cancelled c=cancelled x=available y=waiting " {
		t.Fatalf("after a died: %s", got)
	}
	if g.Workflow.State != twicetype.WorkflowFailed {
		t.Fatalf("workflow state %s, want failed", g.Workflow.State)
	}
	e.runTask(wf, "x", twicetype.JobStateCompleted) // an independent branch goes on
	if got := taskStates(e.workflowGet(wf)); got != "a=dead b=cancelled c=cancelled x=completed y=available " {
		t.Fatalf("after x: %s", got)
	}
}

func testWorkflowCancel(t *testing.T, e *env) {
	wf := e.workflow("", e.task("a"), e.task("b", "a")).Workflow.ID
	res, err := e.s.WorkflowCancel(e.ctx, &twicestore.WorkflowCancelParams{ID: wf, By: "ops", Reason: "wrong input", Now: e.base})
	if err != nil {
		t.Fatal(err)
	}
	if res.Workflow.State != twicetype.WorkflowCancelled || res.Tasks != 1 || len(res.Jobs.IDs) != 1 {
		t.Fatalf("cancel: %+v tasks %d jobs %v", res.Workflow, res.Tasks, res.Jobs.IDs)
	}
	if got := taskStates(e.workflowGet(wf)); got != "a=cancelled b=cancelled " {
		t.Fatalf("after cancel: %s", got)
	}
	if _, err := e.s.WorkflowCancel(e.ctx, &twicestore.WorkflowCancelParams{ID: wf + 1000}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("cancel of a missing workflow: %v, want ErrNotFound", err)
	}
	if _, err := e.s.WorkflowGet(e.ctx, &twicestore.WorkflowGetParams{ID: wf + 1000}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("get of a missing workflow: %v, want ErrNotFound", err)
	}
	list, err := e.s.WorkflowList(e.ctx, &twicestore.WorkflowListParams{State: twicetype.WorkflowCancelled})
	if err != nil || len(list.Workflows) != 1 || list.Workflows[0].ID != wf {
		t.Fatalf("list cancelled: %v %v", list, err)
	}
}

// testWorkflowListPages: a listing pages newest first with Before (the
// lowest id of the page before), every workflow once, the state filter
// holding on each page.
func testWorkflowListPages(t *testing.T, e *env) {
	var ids []int64
	for range 5 {
		ids = append(ids, e.workflow("", e.task("a")).Workflow.ID)
	}
	var got []int64
	before := int64(0)
	for page := 0; ; page++ {
		res, err := e.s.WorkflowList(e.ctx, &twicestore.WorkflowListParams{State: twicetype.WorkflowRunning, Before: before, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Workflows) == 0 || page > 5 {
			break
		}
		for _, w := range res.Workflows {
			got = append(got, w.ID)
		}
		before = res.Workflows[len(res.Workflows)-1].ID
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("paging by 2 listed %v, want %v", got, want)
	}
	if res, err := e.s.WorkflowList(e.ctx, &twicestore.WorkflowListParams{State: twicetype.WorkflowCancelled, Before: ids[4]}); err != nil || len(res.Workflows) != 0 {
		t.Fatalf("a page of cancelled workflows: %v %v", res, err)
	}
}

// testWorkflowRescuedDead: a task whose last attempt's lease expires dies
// by rescue, which fires the policy as a dead outcome would.
func testWorkflowRescuedDead(t *testing.T, e *env) {
	a := e.task("a")
	a.Job.MaxAttempts = 1
	wf := e.workflow(twicetype.WorkflowOnDeadCancel, a, e.task("b", "a")).Workflow.ID
	e.fetchOne(e.base, "storetest.task.v1")
	e.rescue(e.at(2*time.Minute), 0)
	if got := taskStates(e.workflowGet(wf)); got != "a=dead b=cancelled " {
		t.Fatalf("after a's lease expired on its last attempt: %s", got)
	}
}

func (e *env) batch(open, onSuccess bool, n int) (*twicestore.BatchInsertResult, *twicestore.JobInsertParams) {
	e.t.Helper()
	cb := e.job("storetest.callback.v1")
	jobs := make([]*twicestore.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = e.job("storetest.member.v1")
	}
	res, err := e.s.BatchInsert(e.ctx, &twicestore.BatchInsertParams{OnSuccess: onSuccess, Open: open, Callback: cb,
		Jobs: jobs, CreatedAt: e.base})
	if err != nil {
		e.t.Fatalf("BatchInsert: %v", err)
	}
	return res, cb
}

func (e *env) batchGet(id int64) *twicetype.Batch {
	e.t.Helper()
	b, err := e.s.BatchGet(e.ctx, &twicestore.BatchGetParams{ID: id})
	if err != nil {
		e.t.Fatalf("BatchGet: %v", err)
	}
	return b
}

func batchCounts(b *twicetype.Batch) string {
	return fmt.Sprintf("total=%d pending=%d completed=%d dead=%d cancelled=%d callback=%v",
		b.Total, b.Pending, b.Completed, b.Dead, b.Cancelled, b.CallbackJobID != 0)
}

func testBatchCallbackOnce(t *testing.T, e *env) {
	res, cb := e.batch(false, false, 3)
	id := res.Batch.ID
	if got := batchCounts(res.Batch); got != "total=3 pending=3 completed=0 dead=0 cancelled=0 callback=false" {
		t.Fatalf("new batch: %s", got)
	}
	jobs := e.fetch(e.base, 10, "node-a", "storetest.member.v1")
	if len(jobs) != 3 {
		t.Fatalf("fetched %d members", len(jobs))
	}
	e.complete(jobs[0], e.base)
	e.finish(&twicestore.JobOutcome{ID: jobs[1].ID, Epoch: jobs[1].Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
		Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
	if got := batchCounts(e.batchGet(id)); got != "total=3 pending=1 completed=1 dead=1 cancelled=0 callback=false" {
		t.Fatalf("two finished: %s", got)
	}
	e.complete(jobs[2], e.base)
	e.completeWith(jobs[2], e.base) // a repeated completion is not applied
	b := e.batchGet(id)
	if got := batchCounts(b); got != "total=3 pending=0 completed=2 dead=1 cancelled=0 callback=true" {
		t.Fatalf("all finished: %s", got)
	}
	cbs := e.kindIDs(cb.Kind)
	if len(cbs) != 1 || cbs[0] != b.CallbackJobID || b.CallbackKind != cb.Kind {
		t.Fatalf("callbacks %v, batch says %d (%s)", cbs, b.CallbackJobID, b.CallbackKind)
	}
	if got := e.get(cbs[0]); got.State != twicetype.JobStateAvailable || got.Key != cb.Key {
		t.Fatalf("callback job: %+v", got)
	}
}

func testBatchOnSuccess(t *testing.T, e *env) {
	res, cb := e.batch(false, true, 2)
	jobs := e.fetch(e.base, 10, "node-a", "storetest.member.v1")
	e.complete(jobs[0], e.base)
	e.finish(&twicestore.JobOutcome{ID: jobs[1].ID, Epoch: jobs[1].Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
		Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
	if got := batchCounts(e.batchGet(res.Batch.ID)); got != "total=2 pending=0 completed=1 dead=1 cancelled=0 callback=false" {
		t.Fatalf("one dead: %s", got)
	}
	e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{jobs[1].ID}}, Now: e.base})
	if got := batchCounts(e.batchGet(res.Batch.ID)); got != "total=2 pending=1 completed=1 dead=0 cancelled=0 callback=false" {
		t.Fatalf("dead one retried: %s", got)
	}
	e.complete(e.fetchOne(e.at(time.Hour), "storetest.member.v1"), e.base)
	if got := batchCounts(e.batchGet(res.Batch.ID)); got != "total=2 pending=0 completed=2 dead=0 cancelled=0 callback=true" {
		t.Fatalf("all succeeded: %s", got)
	}
	if n := len(e.kindIDs(cb.Kind)); n != 1 {
		t.Fatalf("%d callbacks, want 1", n)
	}
}

func testBatchOpen(t *testing.T, e *env) {
	res, cb := e.batch(true, false, 1)
	id := res.Batch.ID
	e.complete(e.fetchOne(e.base, "storetest.member.v1"), e.base)
	if b := e.batchGet(id); !b.Open || b.CallbackJobID != 0 || b.Pending != 0 {
		t.Fatalf("open batch with nothing pending: %s open=%v, want no callback yet", batchCounts(b), b.Open)
	}
	add, err := e.s.BatchAdd(e.ctx, &twicestore.BatchAddParams{ID: id, Jobs: []*twicestore.JobInsertParams{
		e.job("storetest.member.v1"), e.job("storetest.member.v1")}})
	if err != nil || len(add.Jobs) != 2 || add.Batch.Total != 3 || add.Batch.Pending != 2 {
		t.Fatalf("BatchAdd: %+v, %v", add, err)
	}
	for _, j := range e.fetch(e.base, 10, "node-a", "storetest.member.v1") {
		e.complete(j, e.base)
	}
	if b := e.batchGet(id); b.CallbackJobID != 0 {
		t.Fatalf("callback before the seal: %s", batchCounts(b))
	}
	b, err := e.s.BatchSeal(e.ctx, &twicestore.BatchSealParams{ID: id, Now: e.base})
	if err != nil || b.Open || b.CallbackJobID == 0 {
		t.Fatalf("seal: %+v, %v; want sealed with its callback", b, err)
	}
	if _, err := e.s.BatchSeal(e.ctx, &twicestore.BatchSealParams{ID: id, Now: e.base}); err != nil {
		t.Fatalf("second seal: %v", err)
	}
	if n := len(e.kindIDs(cb.Kind)); n != 1 {
		t.Fatalf("%d callbacks after two seals, want 1", n)
	}
	if _, err := e.s.BatchAdd(e.ctx, &twicestore.BatchAddParams{ID: id, Jobs: []*twicestore.JobInsertParams{
		e.job("storetest.member.v1")}}); !errors.Is(err, twicestore.ErrBatchSealed) {
		t.Fatalf("add to a sealed batch: %v, want ErrBatchSealed", err)
	}
	if _, err := e.s.BatchGet(e.ctx, &twicestore.BatchGetParams{ID: id + 1000}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("get of a missing batch: %v, want ErrNotFound", err)
	}
}

// batchState is a batch's counters and whether it says it finished, and
// with failures.
func batchState(b *twicetype.Batch) string {
	return fmt.Sprintf("%s finished=%v failed=%v", batchCounts(b), !b.FinishedAt.IsZero(), b.Failed())
}

// testBatchFailedFinishes: a batch whose last job finishes finishes, even
// when no callback is due (an OnSuccess batch with a dead, cancelled or
// deleted job): its FinishedAt is set and Failed says why there is no
// callback. A deleted unfinished job counts as cancelled, so it cannot
// leave a batch pending for ever.
func testBatchFailedFinishes(t *testing.T, e *env) {
	const member = "storetest.member.v1"
	t.Run("DeadThenRetried", func(t *testing.T) {
		res, cb := e.batch(false, true, 2)
		jobs := e.fetch(e.base, 10, "node-a", member)
		e.complete(jobs[0], e.base)
		e.finish(&twicestore.JobOutcome{ID: jobs[1].ID, Epoch: jobs[1].Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
			Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
		b := e.batchGet(res.Batch.ID)
		if got := batchState(b); got != "total=2 pending=0 completed=1 dead=1 cancelled=0 callback=false finished=true failed=true" {
			t.Fatalf("one dead: %s", got)
		}
		if b.FinishedAt.Before(e.base) {
			t.Fatalf("finished at %v, before its last job (%v)", b.FinishedAt, e.base)
		}
		e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{jobs[1].ID}}, Now: e.base})
		if got := batchState(e.batchGet(res.Batch.ID)); got != "total=2 pending=0 completed=1 dead=1 cancelled=0 callback=false finished=true failed=true" {
			t.Fatalf("dead one discarded: %s", got)
		}
		e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{jobs[1].ID}}, Now: e.base})
		if got := batchState(e.batchGet(res.Batch.ID)); got != "total=2 pending=1 completed=1 dead=0 cancelled=0 callback=false finished=false failed=false" {
			t.Fatalf("failed one retried: %s", got)
		}
		e.complete(e.fetchOne(e.at(time.Hour), member), e.base)
		if got := batchState(e.batchGet(res.Batch.ID)); got != "total=2 pending=0 completed=2 dead=0 cancelled=0 callback=true finished=true failed=false" {
			t.Fatalf("all succeeded after the retry: %s", got)
		}
		if n := len(e.kindIDs(cb.Kind)); n != 1 {
			t.Fatalf("%d callbacks, want 1", n)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		before := len(e.kindIDs("storetest.callback.v1"))
		res, cb := e.batch(false, true, 2)
		e.cancel("ops", "not needed", e.base, res.Jobs[0].Job.ID)
		e.complete(e.fetchOne(e.base, member), e.base)
		if got := batchState(e.batchGet(res.Batch.ID)); got != "total=2 pending=0 completed=1 dead=0 cancelled=1 callback=false finished=true failed=true" {
			t.Fatalf("one cancelled: %s", got)
		}
		if n := len(e.kindIDs(cb.Kind)) - before; n != 0 {
			t.Fatalf("%d callbacks of a failed OnSuccess batch, want 0", n)
		}
	})
	t.Run("DeletedUnfinished", func(t *testing.T) {
		for _, onSuccess := range []bool{false, true} {
			before := len(e.kindIDs("storetest.callback.v1"))
			res, cb := e.batch(false, onSuccess, 2)
			e.deleteJobs(res.Jobs[0].Job.ID)
			if got := batchState(e.batchGet(res.Batch.ID)); got != "total=2 pending=1 completed=0 dead=0 cancelled=1 callback=false finished=false failed=false" {
				t.Fatalf("onSuccess=%v, one deleted: %s", onSuccess, got)
			}
			e.complete(e.fetchOne(e.base, member), e.base)
			b := e.batchGet(res.Batch.ID)
			want := fmt.Sprintf("total=2 pending=0 completed=1 dead=0 cancelled=1 callback=%v finished=true failed=true", !onSuccess)
			if got := batchState(b); got != want {
				t.Fatalf("onSuccess=%v, the other completed: %s, want %s", onSuccess, got, want)
			}
			if n := len(e.kindIDs(cb.Kind)) - before; (n == 1) != !onSuccess || n > 1 {
				t.Fatalf("onSuccess=%v: %d callbacks", onSuccess, n)
			}
		}
	})
	t.Run("SealedAfterAFailure", func(t *testing.T) {
		res, _ := e.batch(true, true, 1)
		j := e.fetchOne(e.base, member)
		e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
			Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
		if got := batchState(e.batchGet(res.Batch.ID)); got != "total=1 pending=0 completed=0 dead=1 cancelled=0 callback=false finished=false failed=false" {
			t.Fatalf("open, one dead: %s", got)
		}
		b, err := e.s.BatchSeal(e.ctx, &twicestore.BatchSealParams{ID: res.Batch.ID, Now: e.at(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if got := batchState(b); got != "total=1 pending=0 completed=0 dead=1 cancelled=0 callback=false finished=true failed=true" {
			t.Fatalf("sealed with one dead: %s", got)
		}
	})
}

// testWorkflowTaskRunAt: a task's job is due at its own RunAt or when its
// last dependency completed, whichever is later. A root delayed an hour is
// not fetchable before then; a dependant due an hour on waits for its
// RunAt after its dependency completes; one due at base (before the
// completion) is due at the completion.
func testWorkflowTaskRunAt(t *testing.T, e *env) {
	hour := e.at(time.Hour)
	res := e.workflow("", e.taskAt(hour, "late"), e.taskAt(e.base, "first"),
		e.taskAt(hour, "waits", "first"), e.taskAt(e.base, "prompt", "first"))
	wf := res.Workflow.ID
	if len(res.Jobs) != 2 {
		t.Fatalf("insert: %d root jobs, want 2", len(res.Jobs))
	}
	if jobs := e.fetch(e.at(time.Hour-time.Second), 10, "node-a", "storetest.task.late.v1"); len(jobs) != 0 {
		t.Fatalf("a root due in an hour was fetched a second before: %+v", jobs[0])
	}
	late := e.fetchOne(hour, "storetest.task.late.v1")
	if !late.RunAt.Equal(hour) {
		t.Errorf("delayed root: RunAt %s, want %s", late.RunAt, hour)
	}
	e.runTask(wf, "first", twicetype.JobStateCompleted) // completes at base+1s
	due := map[string]time.Time{}
	for _, tk := range e.workflowGet(wf).Tasks {
		if tk.Job != nil {
			due[tk.Name] = tk.Job.RunAt
		}
	}
	if !due["waits"].Equal(hour) || !due["prompt"].Equal(e.at(time.Second)) {
		t.Fatalf("dependants released by a completion at %s: waits due %s (want its own RunAt %s), prompt due %s (want the completion)",
			e.at(time.Second), due["waits"], hour, due["prompt"])
	}
	if jobs := e.fetch(e.at(time.Minute), 10, "node-a", "storetest.task.waits.v1"); len(jobs) != 0 {
		t.Fatalf("a dependant due in an hour was fetched a minute after its dependency completed: %+v", jobs[0])
	}
	e.fetchOne(e.at(time.Second), "storetest.task.prompt.v1")
	e.fetchOne(hour, "storetest.task.waits.v1")
}

// testBatchList: batches list newest first, a page at a time, and the
// unfinished ones alone on request.
func testBatchList(t *testing.T, e *env) {
	var ids []int64
	for i := range 3 {
		res, _ := e.batch(false, false, 1)
		ids = append(ids, res.Batch.ID)
		if i == 0 { // the oldest finishes
			j := e.fetchOne(e.base, "storetest.member.v1")
			e.complete(j, e.base)
		}
	}
	list := func(p *twicestore.BatchListParams) []int64 {
		t.Helper()
		res, err := e.s.BatchList(e.ctx, p)
		if err != nil {
			t.Fatalf("BatchList: %v", err)
		}
		var got []int64
		for _, b := range res.Batches {
			got = append(got, b.ID)
		}
		return got
	}
	if got := list(&twicestore.BatchListParams{}); !slices.Equal(got, []int64{ids[2], ids[1], ids[0]}) {
		t.Fatalf("BatchList = %v, want %v newest first", got, ids)
	}
	if got := list(&twicestore.BatchListParams{Limit: 2}); !slices.Equal(got, []int64{ids[2], ids[1]}) {
		t.Fatalf("first page of 2 = %v", got)
	}
	if got := list(&twicestore.BatchListParams{Limit: 2, Before: ids[1]}); !slices.Equal(got, []int64{ids[0]}) {
		t.Fatalf("next page = %v", got)
	}
	if got := list(&twicestore.BatchListParams{Unfinished: true}); !slices.Equal(got, []int64{ids[2], ids[1]}) {
		t.Fatalf("unfinished = %v, want the two whose member has not finished", got)
	}
}
