package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// testStepList: a message's steps read back by name, done or only
// claimed, those of other keys and handlers left out, Limit honoured.
func testStepList(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	other := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	for _, p := range []*twicestore.StepParams{
		{Step: "ship", Done: true, Receipt: []byte(`"parcel-1"`)},
		{Step: "charge"},
		{Step: "email", Done: true, Receipt: []byte(`{"id":"m-7"}`)},
	} {
		sp := stepOf(j, p.Step)
		sp.Done, sp.Receipt, sp.Now = p.Done, p.Receipt, e.base
		if res, err := e.s.StepClaim(e.ctx, sp); err != nil || !res.Claimed {
			t.Fatalf("claim %s = %+v, %v", p.Step, res, err)
		}
	}
	for _, sp := range []*twicestore.StepParams{stepOf(other, "charge"), {Handler: "h.other", Key: j.Key, Step: "charge",
		Strategy: "claim-after", JobID: j.ID, Epoch: j.Epoch}} {
		if _, err := e.s.StepClaim(e.ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.s.StepList(e.ctx, &twicestore.StepListParams{Handler: "h.order", Key: j.Key})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.Steps {
		names = append(names, s.Step)
		if s.Handler != "h.order" || s.Key != j.Key || s.JobID != j.ID || s.Epoch != j.Epoch || !s.ClaimedAt.Equal(e.base) {
			t.Errorf("step %s = %+v", s.Step, s)
		}
	}
	if want := []string{"charge", "email", "ship"}; !slices.Equal(names, want) {
		t.Fatalf("StepList = %v, want %v", names, want)
	}
	if s := res.Steps[0]; s.Done() || s.Receipt != nil {
		t.Errorf("claimed step = %+v, want no receipt, not done", s)
	}
	if s := res.Steps[1]; !s.Done() || string(s.Receipt) != `{"id":"m-7"}` || !s.DoneAt.Equal(e.base) {
		t.Errorf("done step = %+v, want its receipt", s)
	}
	res, err = e.s.StepList(e.ctx, &twicestore.StepListParams{Handler: "h.order", Key: j.Key, Limit: 2})
	if err != nil || len(res.Steps) != 2 || res.Steps[1].Step != "email" {
		t.Errorf("StepList with Limit 2 = %v, %v", res, err)
	}
	res, err = e.s.StepList(e.ctx, &twicestore.StepListParams{Handler: "h.order", Key: "no-such-key"})
	if err != nil || len(res.Steps) != 0 {
		t.Errorf("StepList of a key with no steps = %v, %v; want none", res, err)
	}
}

// testJobLinks: a job tells its parent and its batch; a batch's callback
// is its finishing job's child, not a member of the batch.
func testJobLinks(t *testing.T, e *env) {
	links := func(id int64) twicestore.JobLinksResult {
		t.Helper()
		l, err := e.s.JobLinks(e.ctx, &twicestore.JobGetParams{ID: id})
		if err != nil {
			t.Fatalf("JobLinks(%d): %v", id, err)
		}
		return *l
	}
	plain := e.insertOne(e.job("storetest.plain.v1"))
	if got := links(plain.ID); got != (twicestore.JobLinksResult{}) {
		t.Errorf("links of a plain job = %+v, want none", got)
	}
	if _, err := e.s.JobLinks(e.ctx, &twicestore.JobGetParams{ID: 1 << 40}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Errorf("JobLinks of a missing job: %v, want ErrNotFound", err)
	}

	b, _ := e.batch(false, false, 1)
	member := b.Jobs[0].Job
	if got := links(member.ID); got.BatchID != b.Batch.ID || got.ParentID != 0 {
		t.Errorf("links of a batch's job = %+v, want batch %d", got, b.Batch.ID)
	}
	j := e.fetchOne(e.base, member.Kind)
	e.completeWith(j, e.at(time.Second))
	cb := e.batchGet(b.Batch.ID).CallbackJobID
	if cb == 0 {
		t.Fatal("the batch's callback was not inserted")
	}
	if got := links(cb); got.ParentID != member.ID || got.BatchID != 0 {
		t.Errorf("links of the batch's callback = %+v, want parent %d and no batch", got, member.ID)
	}

	const parent, child = "storetest.linkparent.v1", "storetest.linkchild.v1"
	e.insertOne(e.job(parent))
	p := e.fetchOne(e.base, parent)
	e.completeWith(p, e.at(time.Second), e.job(child), e.job(child), e.job(child))
	kids := e.kindIDs(child)
	for _, id := range kids {
		if got := links(id); got.ParentID != p.ID {
			t.Errorf("links of continuation %d = %+v, want parent %d", id, got, p.ID)
		}
	}
	listed, err := e.s.JobChildren(e.ctx, &twicestore.JobChildrenParams{ParentID: p.ID, Limit: 2})
	if err != nil || !slices.Equal(ids(listed), kids[:2]) {
		t.Errorf("JobChildren with Limit 2 = %v, %v; want %v", ids(listed), err, kids[:2])
	}
	if got := e.get(kids[0]).State; got != twicetype.JobStateAvailable {
		t.Errorf("continuation is %s", got)
	}
}
