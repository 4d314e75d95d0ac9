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
