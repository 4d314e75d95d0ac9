package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var finishTests = []test{
	{"Completed", testFinishCompleted},
	{"RetryKeepsErrorHistory", testFinishRetry},
	{"Dead", testFinishDead},
	{"SnoozeRefundsAttempt", testFinishSnooze},
	{"BatchReportsEachOutcome", testFinishBatch},
	{"MarkerClaimedEvenWhenFenced", testFinishMarker},
	{"RejectsInvalidState", testFinishInvalid},
}

func testFinishCompleted(t *testing.T, e *env) {
	const kind = "storetest.completed.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)
	done := e.at(5 * time.Second)
	applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted,
		FinishedAt: done, Note: "no-op: already sent"})
	if !applied[0] {
		t.Fatal("not applied")
	}
	want := *j
	want.State = twicetype.JobStateCompleted
	want.LeaseUntil = time.Time{}
	want.FinishedAt = done
	want.Note = "no-op: already sent"
	checkJob(t, "completed job", e.get(j.ID), &want)
}

func testFinishRetry(t *testing.T, e *env) {
	const kind = "storetest.retry.v1"
	e.insertOne(e.job(kind))
	var history []twicetype.AttemptError
	now := e.base
	for attempt := 1; attempt <= 2; attempt++ {
		j := e.fetchOne(now, kind)
		if j.Attempt != attempt {
			t.Fatalf("fetch %d: attempt = %d", attempt, j.Attempt)
		}
		ae := twicetype.AttemptError{Attempt: attempt, At: now.Add(time.Second), Error: "smtp timeout", Stack: "goroutine 1 [running]:\n..."}
		history = append(history, ae)
		retryAt := now.Add(time.Minute)
		if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
			RunAt: retryAt, Error: &ae}); !applied[0] {
			t.Fatalf("retry %d not applied", attempt)
		}
		want := *j
		want.State = twicetype.JobStateAvailable
		want.RunAt = retryAt
		want.LeaseUntil = time.Time{}
		want.Errors = slices.Clone(history)
		checkJob(t, "retried job", e.get(j.ID), &want)

		if got := e.fetch(retryAt.Add(-time.Microsecond), 1, "node-a", kind); len(got) != 0 {
			t.Fatalf("retried job fetched before its backoff ended")
		}
		now = retryAt
	}
}

func testFinishDead(t *testing.T, e *env) {
	const kind = "storetest.dead.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)
	ae := twicetype.AttemptError{Attempt: 1, At: e.at(time.Second), Error: "card declined: permanent"}
	if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead,
		FinishedAt: e.at(time.Second), Error: &ae}); !applied[0] {
		t.Fatal("not applied")
	}
	want := *j
	want.State = twicetype.JobStateDead
	want.LeaseUntil = time.Time{}
	want.FinishedAt = e.at(time.Second)
	want.Errors = []twicetype.AttemptError{ae}
	checkJob(t, "dead job", e.get(j.ID), &want)
	if got := e.fetch(e.at(time.Hour), 1, "node-a", kind); len(got) != 0 {
		t.Fatal("a dead job was fetched")
	}
}

func testFinishSnooze(t *testing.T, e *env) {
	const kind = "storetest.snooze.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)
	wake := e.at(10 * time.Minute)
	if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
		RunAt: wake, RefundAttempt: true, Snooze: true}); !applied[0] {
		t.Fatal("not applied")
	}
	want := *j
	want.State = twicetype.JobStateAvailable
	want.Attempt = 0
	want.Snoozes = 1
	want.RunAt = wake
	want.LeaseUntil = time.Time{}
	checkJob(t, "snoozed job", e.get(j.ID), &want)

	again := e.fetchOne(wake, kind)
	if again.Attempt != 1 || again.Epoch != 2 {
		t.Fatalf("after a snooze: attempt %d, epoch %d; want 1 (refunded), 2 (never refunded)", again.Attempt, again.Epoch)
	}
	// Snoozes add up; other outcomes leave the count alone.
	e.finish(&twicestore.JobOutcome{ID: again.ID, Epoch: again.Epoch, State: twicetype.JobStateAvailable,
		RunAt: wake, RefundAttempt: true, Snooze: true})
	third := e.fetchOne(wake, kind)
	e.finish(&twicestore.JobOutcome{ID: third.ID, Epoch: third.Epoch, State: twicetype.JobStateAvailable, RunAt: wake,
		Error: &twicetype.AttemptError{Attempt: third.Attempt, At: wake, Error: "boom"}})
	if got := e.get(j.ID).Snoozes; got != 2 {
		t.Fatalf("after two snoozes and a failure: Snoozes = %d, want 2", got)
	}
}

func testFinishBatch(t *testing.T, e *env) {
	const kind = "storetest.batch.v1"
	e.insert(e.job(kind), e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 3, "node-a", kind)
	at := e.at(time.Second)
	applied := e.finish(
		&twicestore.JobOutcome{ID: jobs[0].ID, Epoch: jobs[0].Epoch, State: twicetype.JobStateCompleted, FinishedAt: at},
		&twicestore.JobOutcome{ID: jobs[1].ID, Epoch: jobs[1].Epoch + 7, State: twicetype.JobStateCompleted, FinishedAt: at},
		&twicestore.JobOutcome{ID: jobs[2].ID, Epoch: jobs[2].Epoch, State: twicetype.JobStateAvailable, RunAt: at},
		&twicestore.JobOutcome{ID: 1 << 40, Epoch: 1, State: twicetype.JobStateCompleted, FinishedAt: at}, // no such job
	)
	if want := []bool{true, false, true, false}; !slices.Equal(applied, want) {
		t.Fatalf("Applied = %v, want %v", applied, want)
	}
	states := []twicetype.JobState{twicetype.JobStateCompleted, twicetype.JobStateRunning, twicetype.JobStateAvailable}
	for i, want := range states {
		if got := e.get(jobs[i].ID).State; got != want {
			t.Errorf("job %d: state %s, want %s", i, got, want)
		}
	}
	if got, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{}); err != nil || len(got.Applied) != 0 {
		t.Errorf("empty JobFinish = %v, %v", got, err)
	}
}

// testFinishMarker: a marker travelling with an outcome records an effect
// that happened, so it is claimed even when the lease was lost.
func testFinishMarker(t *testing.T, e *env) {
	const kind = "storetest.marker.v1"
	e.insert(e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 2, "node-a", kind)
	at := e.at(time.Second)
	stale, current := jobs[0], jobs[1]
	e.claim("h.send", "pre-claimed", at) // a claim already there is fine
	applied := e.finish(
		&twicestore.JobOutcome{ID: stale.ID, Epoch: stale.Epoch + 1, State: twicetype.JobStateCompleted, FinishedAt: at,
			Marker: &twicestore.MarkerParams{Handler: "h.send", Key: "k-stale", Now: at}},
		&twicestore.JobOutcome{ID: current.ID, Epoch: current.Epoch, State: twicetype.JobStateCompleted, FinishedAt: at,
			Marker: &twicestore.MarkerParams{Handler: "h.send", Key: "k-current", Now: at}},
		&twicestore.JobOutcome{ID: 1 << 40, Epoch: 1, State: twicetype.JobStateCompleted, FinishedAt: at,
			Marker: &twicestore.MarkerParams{Handler: "h.send", Key: "pre-claimed", Now: at}},
	)
	if want := []bool{false, true, false}; !slices.Equal(applied, want) {
		t.Fatalf("Applied = %v, want %v", applied, want)
	}
	for _, key := range []string{"k-stale", "k-current", "pre-claimed"} {
		if !e.peek("h.send", key) {
			t.Errorf("marker %q not claimed", key)
		}
	}
	// A claim riding with an outcome names the job finishing as claimant.
	if m := e.marker("h.send", "k-current"); m.JobID != current.ID || m.Epoch != current.Epoch {
		t.Errorf("claimant of k-current = job %d epoch %d, want job %d epoch %d", m.JobID, m.Epoch, current.ID, current.Epoch)
	}
	if m := e.marker("h.send", "pre-claimed"); m.JobID != 0 {
		t.Errorf("a refused claim overwrote the claimant: job %d", m.JobID)
	}
	if got := e.get(stale.ID).State; got != twicetype.JobStateRunning {
		t.Errorf("fenced job's state changed to %s", got)
	}
}

func testFinishInvalid(t *testing.T, e *env) {
	const kind = "storetest.invalid.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)
	for _, state := range []twicetype.JobState{twicetype.JobStateRunning, twicetype.JobStateDiscarded, "bogus", ""} {
		_, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{
			{ID: j.ID, Epoch: j.Epoch, State: state, FinishedAt: e.at(time.Second)},
		}})
		if err == nil {
			t.Errorf("outcome state %q accepted", state)
		}
	}
	checkJob(t, "job after invalid outcomes", e.get(j.ID), j)
}
