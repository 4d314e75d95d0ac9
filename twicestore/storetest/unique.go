package storetest

import (
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var uniqueTests = append([]test{
	{"DuplicateWhileUnfinished", testUniqueUnfinished},
	{"DuplicateWithinOneBatch", testUniqueBatch},
	{"OtherKindIsNotDuplicate", testUniqueOtherKind},
	{"DeadFreesKey", testUniqueDead},
	{"EmptyKeyNeverDuplicate", testUniqueEmpty},
	{"ReplaceWaitingHolderOnly", testUniqueReplace},
}, uniqueStatesTests...)

func (e *env) uniqueJob(kind, key string) *twicestore.JobInsertParams {
	p := e.job(kind)
	p.UniqueKey = key
	return p
}

// checkDuplicate fails unless r reports a duplicate of the job with id.
func checkDuplicate(t *testing.T, what string, r *twicestore.JobInsertResult, id int64) {
	t.Helper()
	if !r.Duplicate || r.Job == nil || r.Job.ID != id {
		t.Fatalf("%s: Duplicate %v, job %+v; want a duplicate of job %d", what, r.Duplicate, r.Job, id)
	}
}

func testUniqueUnfinished(t *testing.T, e *env) {
	const kind = "storetest.unique.v1"
	first := e.insert(e.uniqueJob(kind, "tick-1"))[0]
	if first.Duplicate {
		t.Fatal("first insert reported Duplicate")
	}
	dup := e.insert(e.uniqueJob(kind, "tick-1"))[0]
	checkDuplicate(t, "second insert while available", dup, first.Job.ID)
	checkJob(t, "duplicate's job", dup.Job, first.Job)

	running := e.fetchOne(e.base, kind)
	dup = e.insert(e.uniqueJob(kind, "tick-1"))[0]
	checkDuplicate(t, "insert while running", dup, first.Job.ID)
	if dup.Job.State != twicetype.JobStateRunning {
		t.Errorf("duplicate result shows state %s, want the existing job as it is (running)", dup.Job.State)
	}

	e.complete(running, e.at(time.Second))
	again := e.insert(e.uniqueJob(kind, "tick-1"))[0]
	if again.Duplicate || again.Job.ID == first.Job.ID {
		t.Fatalf("after completion: Duplicate %v, id %d; want a new job", again.Duplicate, again.Job.ID)
	}
}

func testUniqueBatch(t *testing.T, e *env) {
	const kind = "storetest.uniquebatch.v1"
	stored := e.insertOne(e.uniqueJob(kind, "stored"))
	res := e.insert(
		e.uniqueJob(kind, "a"),
		e.uniqueJob(kind, "a"),
		e.uniqueJob(kind, "stored"),
		e.uniqueJob(kind, "b"),
		e.job(kind),
		e.uniqueJob(kind, "a"),
	)
	for i, want := range []bool{false, true, true, false, false, true} {
		if res[i].Duplicate != want {
			t.Errorf("result %d: Duplicate = %v, want %v", i, res[i].Duplicate, want)
		}
	}
	checkDuplicate(t, "second a", res[1], res[0].Job.ID)
	checkDuplicate(t, "third a", res[5], res[0].Job.ID)
	checkDuplicate(t, "stored", res[2], stored.ID)
	if res[3].Job.UniqueKey != "b" || res[4].Job.UniqueKey != "" {
		t.Errorf("results out of order: %q, %q", res[3].Job.UniqueKey, res[4].Job.UniqueKey)
	}
	list, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 4 { // stored, a, b and the one without a key
		t.Errorf("%d jobs stored, want 4", len(list.Jobs))
	}
}

func testUniqueOtherKind(t *testing.T, e *env) {
	a := e.insert(e.uniqueJob("storetest.uniquea.v1", "same"))[0]
	b := e.insert(e.uniqueJob("storetest.uniqueb.v1", "same"))[0]
	if a.Duplicate || b.Duplicate || a.Job.ID == b.Job.ID {
		t.Fatalf("same unique key, different kinds: %+v, %+v; want two jobs", a, b)
	}
}

func testUniqueDead(t *testing.T, e *env) {
	const kind = "storetest.uniquedead.v1"
	first := e.insertOne(e.uniqueJob(kind, "k"))
	e.kill(kind, e.base)
	again := e.insert(e.uniqueJob(kind, "k"))[0]
	if again.Duplicate || again.Job.ID == first.ID {
		t.Fatalf("after dead-lettering: Duplicate %v, id %d; want a new job", again.Duplicate, again.Job.ID)
	}
}

func testUniqueEmpty(t *testing.T, e *env) {
	const kind = "storetest.uniqueempty.v1"
	res := e.insert(e.job(kind), e.job(kind))
	res = append(res, e.insert(e.job(kind))...)
	for i, r := range res {
		if r.Duplicate {
			t.Errorf("job %d without a unique key reported Duplicate", i)
		}
	}
}

// testUniqueReplace: Replace moves args and run time onto a waiting holder,
// never onto a running one, and inserts once the holder finished.
func testUniqueReplace(t *testing.T, e *env) {
	const kind = "storetest.uniquereplace.v1"
	replace := func(args string, runAt time.Time) *twicestore.JobInsertParams {
		p := e.uniqueJob(kind, "debounce")
		p.Args, p.RunAt, p.Replace = []byte(args), runAt, true
		return p
	}
	first := e.insert(replace(`{"n":1}`, e.at(time.Minute)))[0]
	if first.Duplicate || first.Replaced {
		t.Fatalf("first insert: Duplicate %v, Replaced %v; want a new job", first.Duplicate, first.Replaced)
	}
	res := e.insert(replace(`{"n":2}`, e.at(2*time.Minute)), replace(`{"n":3}`, e.base))
	for i, r := range res {
		checkDuplicate(t, "replace of a waiting holder", r, first.Job.ID)
		if !r.Replaced {
			t.Fatalf("result %d: Replaced false for a waiting holder", i)
		}
	}
	got, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: first.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Args) != `{"n":3}` || !got.RunAt.Equal(e.base) || got.UniqueKey != "debounce" {
		t.Fatalf("holder after replaces: args %s, run at %s, key %q; want the last: {\"n\":3} at %s, key debounce",
			got.Args, got.RunAt, got.UniqueKey, e.base)
	}

	running := e.fetchOne(e.base, kind)
	dup := e.insert(replace(`{"n":4}`, e.base))[0]
	checkDuplicate(t, "replace of a running holder", dup, first.Job.ID)
	if dup.Replaced || string(dup.Job.Args) != `{"n":3}` {
		t.Fatalf("running holder: Replaced %v, args %s; want it untouched", dup.Replaced, dup.Job.Args)
	}

	e.complete(running, e.at(time.Second))
	again := e.insert(replace(`{"n":5}`, e.base))[0]
	if again.Duplicate || again.Replaced || again.Job.ID == first.Job.ID {
		t.Fatalf("after completion: Duplicate %v, Replaced %v, id %d; want a new job", again.Duplicate, again.Replaced, again.Job.ID)
	}
}
