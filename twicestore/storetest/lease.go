package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var leaseTests = []test{
	{"ExtendOnlyWithMatchingEpoch", testLeaseExtend},
	{"RescueRequeuesExpired", testRescueRequeue},
	{"RescueDeadWhenNoAttemptsLeft", testRescueDead},
	{"RescueLimit", testRescueLimit},
	{"StaleFinishIsFenced", testFencing},
}

func (e *env) extend(until time.Time, leases ...twicestore.JobLease) []int64 {
	e.t.Helper()
	res, err := e.s.JobExtendLease(e.ctx, &twicestore.JobExtendLeaseParams{Leases: leases, LeaseUntil: until})
	if err != nil {
		e.t.Fatalf("JobExtendLease: %v", err)
	}
	return sorted(res.Extended)
}

func (e *env) rescue(now time.Time, limit int) *twicestore.JobRescueResult {
	e.t.Helper()
	res, err := e.s.JobRescue(e.ctx, &twicestore.JobRescueParams{Now: now, Limit: limit})
	if err != nil {
		e.t.Fatalf("JobRescue: %v", err)
	}
	res.Requeued, res.Dead = sorted(res.Requeued), sorted(res.Dead)
	// Jobs are the same jobs, in id order, each in the state its list
	// says, with the rescue's error last in its history.
	want := map[int64]twicetype.JobState{}
	for _, id := range res.Requeued {
		want[id] = twicetype.JobStateAvailable
	}
	for _, id := range res.Dead {
		want[id] = twicetype.JobStateDead
	}
	for _, id := range res.Cancelled {
		want[id] = twicetype.JobStateCancelled
	}
	if len(res.Jobs) != len(want) {
		e.t.Fatalf("JobRescue: %d jobs for %d ids", len(res.Jobs), len(want))
	}
	for i, j := range res.Jobs {
		if i > 0 && j.ID <= res.Jobs[i-1].ID {
			e.t.Errorf("JobRescue: jobs not in id order: %d after %d", j.ID, res.Jobs[i-1].ID)
		}
		if j.State != want[j.ID] || j.LeaseUntil != (time.Time{}) {
			e.t.Errorf("JobRescue: job %d is %s (lease %v), its list says %s and no lease", j.ID, j.State, j.LeaseUntil, want[j.ID])
		}
		if j.State != twicetype.JobStateCancelled && (len(j.Errors) == 0 || !strings.Contains(j.Errors[len(j.Errors)-1].Error, "lease expired")) {
			e.t.Errorf("JobRescue: job %d's history %v does not end with its lease's expiry", j.ID, j.Errors)
		}
	}
	return res
}

func testLeaseExtend(t *testing.T, e *env) {
	const kind = "storetest.extend.v1"
	e.insert(e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 2, "node-a", kind) // lease until base+1m
	j1, j2 := jobs[0], jobs[1]

	until := e.at(3 * time.Minute)
	got := e.extend(until,
		twicestore.JobLease{ID: j1.ID, Epoch: j1.Epoch},
		twicestore.JobLease{ID: j2.ID, Epoch: j2.Epoch + 1}, // not this holder's epoch
	)
	if !slices.Equal(got, []int64{j1.ID}) {
		t.Fatalf("Extended = %v, want [%d]", got, j1.ID)
	}
	if l := e.get(j1.ID).LeaseUntil; !l.Equal(until) {
		t.Errorf("matching epoch: lease = %v, want %v", l, until)
	}
	if l := e.get(j2.ID).LeaseUntil; !l.Equal(j2.LeaseUntil) {
		t.Errorf("stale epoch: lease moved to %v, want it left at %v", l, j2.LeaseUntil)
	}

	// A finished job's lease is never extended, even with its epoch.
	e.complete(j1, e.at(time.Second))
	if got := e.extend(e.at(time.Hour), twicestore.JobLease{ID: j1.ID, Epoch: j1.Epoch}); len(got) != 0 {
		t.Errorf("extended a completed job: %v", got)
	}
	if got := e.extend(e.at(time.Hour)); len(got) != 0 {
		t.Errorf("extending no leases returned %v", got)
	}
}

func testRescueRequeue(t *testing.T, e *env) {
	const kind = "storetest.rescue.v1"
	j := e.insertOne(e.job(kind)) // MaxAttempts 3
	fetched := e.fetch(e.base, 1, "node-a", kind)[0]

	if res := e.rescue(e.at(30*time.Second), 0); len(res.Requeued)+len(res.Dead) != 0 {
		t.Fatalf("rescued a live lease: %+v", res)
	}
	// At the deadline itself the lease has not expired yet.
	if res := e.rescue(fetched.LeaseUntil, 0); len(res.Requeued)+len(res.Dead) != 0 {
		t.Fatalf("rescued a lease at its deadline: %+v", res)
	}
	res := e.rescue(e.at(2*time.Minute), 0)
	if !slices.Equal(res.Requeued, []int64{j.ID}) || len(res.Dead) != 0 {
		t.Fatalf("rescue = %+v, want requeued [%d]", res, j.ID)
	}
	got := e.get(j.ID)
	if got.State != twicetype.JobStateAvailable || !got.LeaseUntil.IsZero() || got.Attempt != 1 || got.Epoch != 1 {
		t.Fatalf("rescued job: state %s, lease %v, attempt %d, epoch %d; want available, none, 1, 1",
			got.State, got.LeaseUntil, got.Attempt, got.Epoch)
	}
	checkLeaseError(t, got, 1)

	again := e.fetch(e.at(2*time.Minute), 1, "node-b", kind)
	if len(again) != 1 || again[0].Epoch != 2 || again[0].Attempt != 2 || again[0].AttemptedBy != "node-b" {
		t.Fatalf("refetch after rescue = %+v, want epoch 2, attempt 2 on node-b", again)
	}
}

func testRescueDead(t *testing.T, e *env) {
	const kind = "storetest.rescuedead.v1"
	p := e.job(kind)
	p.MaxAttempts = 1
	j := e.insertOne(p)
	e.fetch(e.base, 1, "node-a", kind)

	now := e.at(2 * time.Minute)
	res := e.rescue(now, 0)
	if !slices.Equal(res.Dead, []int64{j.ID}) || len(res.Requeued) != 0 {
		t.Fatalf("rescue = %+v, want dead [%d]", res, j.ID)
	}
	got := e.get(j.ID)
	if got.State != twicetype.JobStateDead || !got.LeaseUntil.IsZero() || got.FinishedAt.IsZero() {
		t.Fatalf("state %s, lease %v, finished %v; want dead, no lease, finished", got.State, got.LeaseUntil, got.FinishedAt)
	}
	checkLeaseError(t, got, 1)
	if got := e.fetch(e.at(time.Hour), 10, "node-a", kind); len(got) != 0 {
		t.Fatalf("a dead job was fetched: %v", ids(got))
	}
}

// checkLeaseError checks the job's last recorded error is the lease expiry
// of attempt.
func checkLeaseError(t *testing.T, j *twicetype.JobRow, attempt int) {
	t.Helper()
	if len(j.Errors) == 0 {
		t.Fatalf("job %d has no error recorded for its expired lease", j.ID)
	}
	last := j.Errors[len(j.Errors)-1]
	if last.Attempt != attempt || !strings.Contains(strings.ToLower(last.Error), "lease expired") || last.At.IsZero() {
		t.Fatalf("last error = %+v, want attempt %d saying the lease expired, with a time", last, attempt)
	}
}

func testRescueLimit(t *testing.T, e *env) {
	const kind = "storetest.rescuelimit.v1"
	e.insert(e.job(kind), e.job(kind), e.job(kind))
	e.fetch(e.base, 3, "node-a", kind)
	now := e.at(time.Hour)
	if res := e.rescue(now, 2); len(res.Requeued) != 2 {
		t.Fatalf("rescue with Limit 2 requeued %v", res.Requeued)
	}
	if res := e.rescue(now, 2); len(res.Requeued) != 1 {
		t.Fatalf("second rescue requeued %v, want the last one", res.Requeued)
	}
}

// testFencing replays River #1302: a worker whose lease expired and whose
// job was fetched again elsewhere reports late; its outcome must not land.
func testFencing(t *testing.T, e *env) {
	const kind = "storetest.fence.v1"
	e.insertOne(e.job(kind))
	old := e.fetch(e.base, 1, "node-a", kind)[0]
	e.rescue(e.at(2*time.Minute), 0)
	current := e.fetch(e.at(2*time.Minute), 1, "node-b", kind)[0]
	if current.Epoch <= old.Epoch {
		t.Fatalf("refetch epoch %d is not above the old holder's %d", current.Epoch, old.Epoch)
	}
	before := e.get(current.ID)

	for _, state := range []twicetype.JobState{twicetype.JobStateCompleted, twicetype.JobStateAvailable, twicetype.JobStateDead} {
		applied := e.finish(&twicestore.JobOutcome{ID: old.ID, Epoch: old.Epoch, State: state,
			RunAt: e.at(time.Hour), FinishedAt: e.at(3 * time.Minute), Note: "late",
			Error: &twicetype.AttemptError{Attempt: old.Attempt, At: e.at(3 * time.Minute), Error: "late"}})
		if applied[0] {
			t.Fatalf("stale %s outcome (epoch %d) was applied over epoch %d", state, old.Epoch, current.Epoch)
		}
		checkJob(t, "job after a stale "+string(state)+" outcome", e.get(current.ID), before)
	}
	if got := e.extend(e.at(time.Hour), twicestore.JobLease{ID: old.ID, Epoch: old.Epoch}); len(got) != 0 {
		t.Fatalf("stale lease extended: %v", got)
	}

	e.complete(current, e.at(4*time.Minute))
	if got := e.get(current.ID); got.State != twicetype.JobStateCompleted {
		t.Fatalf("current holder's outcome not applied: state %s", got.State)
	}
	// Once finished, even the last holder cannot write again.
	if applied := e.finish(&twicestore.JobOutcome{ID: current.ID, Epoch: current.Epoch,
		State: twicetype.JobStateDead, FinishedAt: e.at(5 * time.Minute)}); applied[0] {
		t.Fatal("a second outcome for a finished job was applied")
	}
}
