package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The cancel poll: a worker's read of the cancel requests on its leases.
var cancelPollTests = []test{
	{"ReportsOwnLeasesOnly", testCancelPollOwnLeases},
	{"WritesNothing", testCancelPollWritesNothing},
}

func (e *env) cancelRequested(leases ...twicestore.JobLease) []int64 {
	e.t.Helper()
	res, err := e.s.JobCancelRequested(e.ctx, &twicestore.JobCancelRequestedParams{Leases: leases})
	if err != nil {
		e.t.Fatalf("JobCancelRequested: %v", err)
	}
	return res.IDs
}

// testCancelPollOwnLeases: of the leases asked about, only the running
// ones under their epoch with a cancel request are reported, ascending;
// a stale epoch, a finished job and a job with no request are not.
func testCancelPollOwnLeases(t *testing.T, e *env) {
	const kind = "storetest.cancelpoll.v1"
	e.insert(e.job(kind), e.job(kind), e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 4, "node-a", kind)
	a, b, quiet, done := jobs[0], jobs[1], jobs[2], jobs[3]
	lease := func(j *twicetype.JobRow) twicestore.JobLease { return twicestore.JobLease{ID: j.ID, Epoch: j.Epoch} }

	if got := e.cancelRequested(); len(got) != 0 {
		t.Fatalf("JobCancelRequested of no leases = %v, want none", got)
	}
	if got := e.cancelRequested(lease(a), lease(b), lease(quiet)); len(got) != 0 {
		t.Fatalf("JobCancelRequested before any cancel = %v, want none", got)
	}
	e.cancel("ops", "stop", e.at(time.Second), b.ID, a.ID, done.ID)
	if got, want := e.cancelRequested(lease(b), lease(quiet), lease(a)), sorted([]int64{a.ID, b.ID}); !slices.Equal(got, want) {
		t.Fatalf("JobCancelRequested = %v, want %v", got, want)
	}
	stale := lease(a)
	stale.Epoch++
	if got := e.cancelRequested(stale); len(got) != 0 {
		t.Fatalf("JobCancelRequested of a stale epoch = %v, want none", got)
	}
	now := e.at(2 * time.Second)
	e.finish(&twicestore.JobOutcome{ID: done.ID, Epoch: done.Epoch, State: twicetype.JobStateCancelled, FinishedAt: now})
	if got := e.cancelRequested(lease(done)); len(got) != 0 {
		t.Fatalf("JobCancelRequested of a finished job = %v, want none", got)
	}
}

// testCancelPollWritesNothing: the poll is a read; the job's lease and
// request are as they were.
func testCancelPollWritesNothing(t *testing.T, e *env) {
	const kind = "storetest.cancelpollread.v1"
	e.insert(e.job(kind))
	j := e.fetchOne(e.base, kind)
	e.cancel("ops", "stop", e.at(time.Second), j.ID)
	before := e.get(j.ID)
	if got := e.cancelRequested(twicestore.JobLease{ID: j.ID, Epoch: j.Epoch}); !slices.Equal(got, []int64{j.ID}) {
		t.Fatalf("JobCancelRequested = %v, want [%d]", got, j.ID)
	}
	checkJob(t, "job after the poll", e.get(j.ID), before)
}
