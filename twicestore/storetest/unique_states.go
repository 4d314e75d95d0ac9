package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Unique keys held in finished states (JobInsertParams.UniqueStates): the
// unique index covers a job while its current state is among its own
// states, so a finished job can keep its key and the database still
// settles races.
var uniqueStatesTests = []test{
	{"FinishedHolderBlocksOnlyWithItsState", testUniqueFinishedHolder},
	{"ConcurrentInsertersOneRow", testUniqueStatesConcurrent},
	{"RetryHeldByFinishedHolder", testUniqueStatesRetry},
	{"RetryTakesTheKeyBack", testUniqueStatesRetryTakesKey},
	{"DeleteFreesTheKey", testUniqueStatesDelete},
	{"DiscardKeepsDeadHolder", testUniqueStatesDiscard},
	{"ReplaceFinishedHolderIsDuplicate", testUniqueStatesReplace},
	{"MixedStatesInOneBatch", testUniqueStatesBatch},
	{"InvalidStatesRefused", testUniqueStatesInvalid},
}

// uniqueIn is a unique job holding key in the default states plus extra.
func (e *env) uniqueIn(kind, key string, extra ...twicetype.JobState) *twicestore.JobInsertParams {
	p := e.uniqueJob(kind, key)
	p.UniqueStates = twicetype.UniqueStatesDefault | twicetype.UniqueStatesOf(extra...)
	return p
}

// finishAs inserts p (the only job of its kind) and brings it to state,
// through the path a real job takes there; it returns the finished row.
func (e *env) finishAs(p *twicestore.JobInsertParams, state twicetype.JobState) *twicetype.JobRow {
	e.t.Helper()
	j := e.insertOne(p)
	switch state {
	case twicetype.JobStateCompleted:
		e.complete(e.fetchOne(e.base, p.Kind), e.at(time.Second))
	case twicetype.JobStateDead:
		e.kill(p.Kind, e.base)
	case twicetype.JobStateDiscarded:
		e.kill(p.Kind, e.base)
		if _, err := e.s.JobDiscard(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{j.ID}}}); err != nil {
			e.t.Fatalf("JobDiscard: %v", err)
		}
	case twicetype.JobStateCancelled:
		e.cancel("ops", "test", e.base, j.ID)
	default:
		e.t.Fatalf("finishAs %s: not a finished state", state)
	}
	j = e.get(j.ID)
	if j.State != state {
		e.t.Fatalf("job %d is %s, want %s", j.ID, j.State, state)
	}
	return j
}

// testUniqueFinishedHolder: a finished job holds its key exactly when its
// state is among its unique states, for every finished state.
func testUniqueFinishedHolder(t *testing.T, e *env) {
	for _, tc := range []struct {
		state twicetype.JobState
		extra []twicetype.JobState
	}{
		{twicetype.JobStateCompleted, []twicetype.JobState{twicetype.JobStateCompleted}},
		{twicetype.JobStateDead, []twicetype.JobState{twicetype.JobStateDead}},
		{twicetype.JobStateCancelled, []twicetype.JobState{twicetype.JobStateCancelled}},
		{twicetype.JobStateDiscarded, []twicetype.JobState{twicetype.JobStateDead, twicetype.JobStateDiscarded}},
	} {
		for _, holds := range []bool{true, false} {
			kind := fmt.Sprintf("storetest.uniquestates.%s.%v.v1", tc.state, holds)
			var extra []twicetype.JobState
			if holds {
				extra = tc.extra
			} else {
				// Every finished state but this one: only the job's
				// current state counts.
				for _, s := range twicetype.AllJobStates {
					if s.Finished() && s != tc.state && s != twicetype.JobStateDiscarded {
						extra = append(extra, s)
					}
				}
			}
			holder := e.finishAs(e.uniqueIn(kind, "k", extra...), tc.state)
			// The new job holds in the default states only: what counts
			// is the holder's states, not the inserter's.
			r := e.insert(e.uniqueJob(kind, "k"))[0]
			what := fmt.Sprintf("%s holder with states %s", tc.state, twicetype.UniqueStatesDefault|twicetype.UniqueStatesOf(extra...))
			if holds {
				checkDuplicate(t, what, r, holder.ID)
				if r.Job.State != tc.state {
					t.Errorf("%s: duplicate shows state %s, want the holder as it is", what, r.Job.State)
				}
				continue
			}
			if r.Duplicate || r.Job.ID == holder.ID {
				t.Errorf("%s: Duplicate %v, id %d; want a new job", what, r.Duplicate, r.Job.ID)
			}
		}
	}
}

// testUniqueStatesConcurrent: eight inserters racing for a key, each on its
// own connection (PostgreSQL's pool hands each call one), store one job
// between them, whether a finished job holds the key or not.
func testUniqueStatesConcurrent(t *testing.T, e *env) {
	const inserters = 8
	for _, held := range []bool{false, true} {
		kind := fmt.Sprintf("storetest.uniquestatesrace.%v.v1", held)
		var extra []twicetype.JobState
		if held {
			extra = []twicetype.JobState{twicetype.JobStateCompleted}
		}
		// A completed job with the same key: it holds the key only when
		// completed is among its states.
		old := e.finishAs(e.uniqueIn(kind, "k", extra...), twicetype.JobStateCompleted)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			ids   = map[int64]int{}
		)
		for range inserters {
			wg.Go(func() {
				<-start
				res, err := e.s.JobInsertMany(e.ctx, &twicestore.JobInsertManyParams{
					Jobs: []*twicestore.JobInsertParams{e.uniqueIn(kind, "k", twicetype.JobStateCompleted)}})
				if err != nil {
					t.Errorf("JobInsertMany: %v", err)
					return
				}
				mu.Lock()
				ids[res.Jobs[0].Job.ID]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if len(ids) != 1 {
			t.Fatalf("held %v: inserters got jobs %v, want one job for all", held, ids)
		}
		for id := range ids {
			if held && id != old.ID {
				t.Errorf("held: inserters got job %d, want the completed holder %d", id, old.ID)
			}
			if !held && id == old.ID {
				t.Errorf("not held: inserters got the completed job %d, want a new one", id)
			}
		}
		list, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}})
		if err != nil {
			t.Fatal(err)
		}
		want := 2
		if held {
			want = 1
		}
		if len(list.Jobs) != want {
			t.Errorf("held %v: %d jobs stored, want %d", held, len(list.Jobs), want)
		}
	}
}

// testUniqueStatesRetry: a retry of a dead job whose key a completed job
// holds is a conflict naming the holder, not an error; a dead job that
// holds its own key is retried.
func testUniqueStatesRetry(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesretry.v1"
	dead := e.finishAs(e.uniqueJob(kind, "k"), twicetype.JobStateDead)
	holder := e.finishAs(e.uniqueIn(kind, "k", twicetype.JobStateCompleted), twicetype.JobStateCompleted)
	res := e.retryResults(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID}}, Now: e.at(time.Minute)})
	checkResults(t, "retry held by a completed job", res,
		twicestore.JobActionResult{ID: dead.ID, Status: twicestore.JobActionConflict, State: twicetype.JobStateDead, HolderID: holder.ID})
	if got := e.get(dead.ID); got.State != twicetype.JobStateDead {
		t.Errorf("held job is %s after the retry, want dead", got.State)
	}

	const own = "storetest.uniquestatesretryown.v1"
	mine := e.finishAs(e.uniqueIn(own, "k", twicetype.JobStateDead), twicetype.JobStateDead)
	res = e.retryResults(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{mine.ID}}, Now: e.at(time.Minute)})
	checkResults(t, "retry of a dead job holding its own key", res,
		twicestore.JobActionResult{ID: mine.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable})
	checkDuplicate(t, "insert after the retry", e.insert(e.uniqueJob(own, "k"))[0], mine.ID)
}

// testUniqueStatesRetryTakesKey: a dead job that let its key go takes it
// back when retried, so a job enqueued with that key afterwards is its
// duplicate, and its next release frees the key again.
func testUniqueStatesRetryTakesKey(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesretrytakes.v1"
	dead := e.finishAs(e.uniqueJob(kind, "k"), twicetype.JobStateDead)
	res := e.retryResults(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID}}, Now: e.at(time.Minute)})
	checkResults(t, "retry of a dead job whose key is free", res,
		twicestore.JobActionResult{ID: dead.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable})
	checkDuplicate(t, "insert after the retry", e.insert(e.uniqueJob(kind, "k"))[0], dead.ID)
	e.complete(e.fetchOne(e.at(time.Hour), kind), e.at(time.Hour))
	if r := e.insert(e.uniqueJob(kind, "k"))[0]; r.Duplicate {
		t.Errorf("insert after the retried job completed: a duplicate of job %d, want a new job", r.Job.ID)
	}
}

// testUniqueStatesDelete: a holder that is deleted, by an operator while it
// waits or by retention once finished, frees its key.
func testUniqueStatesDelete(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesdelete.v1"
	waiting := e.insertOne(e.uniqueJob(kind, "waiting"))
	if _, err := e.s.JobDelete(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{waiting.ID}}}); err != nil {
		t.Fatalf("JobDelete: %v", err)
	}
	if r := e.insert(e.uniqueJob(kind, "waiting"))[0]; r.Duplicate {
		t.Errorf("insert after the waiting holder was deleted: a duplicate of job %d, want a new job", r.Job.ID)
	}
	const kept = "storetest.uniquestatesdeletekept.v1"
	e.finishAs(e.uniqueIn(kept, "k", twicetype.JobStateCompleted), twicetype.JobStateCompleted)
	e.deleteFinished(false)
	if r := e.insert(e.uniqueIn(kept, "k", twicetype.JobStateCompleted))[0]; r.Duplicate {
		t.Errorf("insert after retention deleted the completed holder: a duplicate of job %d, want a new job", r.Job.ID)
	}
}

// testUniqueStatesDiscard: a dead job holding its key (dead and discarded
// among its states) keeps it when discarded.
func testUniqueStatesDiscard(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesdiscard.v1"
	dead := e.finishAs(e.uniqueIn(kind, "k", twicetype.JobStateDead, twicetype.JobStateDiscarded), twicetype.JobStateDead)
	checkDuplicate(t, "insert while the holder is dead", e.insert(e.uniqueJob(kind, "k"))[0], dead.ID)
	res, err := e.s.JobDiscard(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID}}})
	if err != nil {
		t.Fatalf("JobDiscard: %v", err)
	}
	checkResults(t, "discard", res,
		twicestore.JobActionResult{ID: dead.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateDiscarded})
	checkDuplicate(t, "insert while the holder is discarded", e.insert(e.uniqueJob(kind, "k"))[0], dead.ID)
}

// testUniqueStatesReplace: Replace never touches a finished holder: the
// enqueue is a plain duplicate.
func testUniqueStatesReplace(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesreplace.v1"
	holder := e.finishAs(e.uniqueIn(kind, "k", twicetype.JobStateCompleted), twicetype.JobStateCompleted)
	p := e.uniqueIn(kind, "k", twicetype.JobStateCompleted)
	p.Args, p.Replace = []byte(`{"n":2}`), true
	r := e.insert(p)[0]
	checkDuplicate(t, "replace of a completed holder", r, holder.ID)
	if r.Replaced || string(r.Job.Args) != `{"n":1}` || r.Job.State != twicetype.JobStateCompleted {
		t.Fatalf("completed holder: Replaced %v, args %s, state %s; want it untouched", r.Replaced, r.Job.Args, r.Job.State)
	}
	if got := e.get(holder.ID); string(got.Args) != `{"n":1}` {
		t.Fatalf("holder's args are %s after the replace, want {\"n\":1}", got.Args)
	}
}

// testUniqueStatesBatch: in one batch, each job takes its own states: the
// first of a key's repeats is inserted with its states, which decide
// whether it holds the key once completed.
func testUniqueStatesBatch(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesbatch.v1"
	res := e.insert(
		e.uniqueJob(kind, "plain"),
		e.uniqueIn(kind, "plain", twicetype.JobStateCompleted), // a duplicate: its states are not stored
		e.uniqueIn(kind, "kept", twicetype.JobStateCompleted),
		e.uniqueJob(kind, "kept"),
	)
	for i, want := range []bool{false, true, false, true} {
		if res[i].Duplicate != want {
			t.Fatalf("result %d: Duplicate = %v, want %v", i, res[i].Duplicate, want)
		}
	}
	for _, j := range e.fetch(e.base, 10, "node-a", kind) {
		e.complete(j, e.at(time.Second))
	}
	if r := e.insert(e.uniqueJob(kind, "plain"))[0]; r.Duplicate {
		t.Errorf("plain: a completed job holding in the default states blocked an insert (job %d)", r.Job.ID)
	}
	checkDuplicate(t, "kept", e.insert(e.uniqueJob(kind, "kept"))[0], res[2].Job.ID)
}

// testUniqueStatesInvalid: states without available and running, or with
// discarded but not dead, or with unknown bits, are refused, and nothing of
// the batch is stored.
func testUniqueStatesInvalid(t *testing.T, e *env) {
	const kind = "storetest.uniquestatesinvalid.v1"
	for _, states := range []twicetype.UniqueStates{
		twicetype.UniqueAvailable,
		twicetype.UniqueAvailable | twicetype.UniqueCompleted,
		twicetype.UniqueStatesDefault | twicetype.UniqueDiscarded,
		twicetype.UniqueStatesDefault | 1<<7,
	} {
		bad := e.uniqueJob(kind, "k")
		bad.UniqueStates = states
		_, err := e.s.JobInsertMany(e.ctx, &twicestore.JobInsertManyParams{
			Jobs: []*twicestore.JobInsertParams{e.uniqueJob(kind, "other"), bad}})
		if err == nil {
			t.Errorf("states %s: insert succeeded, want an error", states)
		}
	}
	list, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 0 {
		t.Errorf("%d jobs stored by refused batches, want none", len(list.Jobs))
	}
}
