package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// parkedJob parks the setup's running watermark job on the wait name, as
// its handler would with twice.AwaitSignal, and returns its id.
func parkedJob(t *testing.T, s *setup, name string) int64 {
	t.Helper()
	id := runningJob(t, s)
	store, err := twicesqlite.Open(t.Context(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	j, err := store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: id, Epoch: j.Epoch, State: twicetype.JobStateWaiting, RunAt: time.Now().Add(time.Hour), RefundAttempt: true,
		WaitName: name, SignalSeq: j.SignalSeq, Note: "waiting for signal " + name,
	}}})
	if err != nil || !res.Applied[0] {
		t.Fatalf("park: %v %v", res, err)
	}
	return id
}

// TestJobsSignal: a waiting job shows what it waits for and until when;
// a signal wakes it, a repeat says what the first was, and bad input is
// a usage error that stores nothing.
func TestJobsSignal(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	id := parkedJob(t, s, "approve")
	ids := strconv.FormatInt(id, 10)

	if r := s.ok("jobs", "--state", "waiting"); !strings.Contains(r.stdout, "waiting") || !strings.Contains(r.stdout, ids) {
		t.Errorf("jobs --state waiting:\n%s", r.stdout)
	}
	if r := s.ok("jobs", "show", ids); !strings.Contains(r.stdout, "waiting for signal approve (times out at") {
		t.Errorf("jobs show of a waiting job:\n%s", r.stdout)
	}
	wantError(t, s.run("jobs", "signal", ids, "approve", "--payload", "{nope"), ExitUsage, "--payload is not JSON")
	wantError(t, s.run("jobs", "signal", ids, "approve", "--payload", `{"api_key":"x"}`), ExitUsage, "looks like")
	wantError(t, s.run("jobs", "signal", "999", "approve"), ExitUsage, "job not found")
	wantError(t, s.run("jobs", "signal", ids), ExitUsage, "ID NAME")
	if st := jobState(t, s, id); st != "waiting" {
		t.Fatalf("after refused signals the job is %s", st)
	}

	r := s.ok("jobs", "signal", ids, "approve", "--payload", `{"approved": true}`, "--by", "ann@ops")
	if want := "job " + ids + ": signal approve delivered; the job was waiting for it and runs again now\n"; r.stdout != want {
		t.Errorf("signal printed %q, want %q", r.stdout, want)
	}
	if st := jobState(t, s, id); st != "available" {
		t.Errorf("the signalled job is %s, want available", st)
	}
	r = s.ok("jobs", "signal", ids, "approve", "--payload", `{"approved": false}`, "--json")
	var out signalJSON
	var first struct{ Approved bool }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Duplicate || out.Existing == nil ||
		out.Existing.Sender != "ann@ops" || json.Unmarshal(out.Existing.Payload, &first) != nil || !first.Approved {
		t.Errorf("a repeat printed %s (%v), want a duplicate naming the first", r.stdout, err)
	}
}

// TestJobsRunNow: a scheduled job becomes due now; a running job is
// refused with its state; a waiting one is told to take its signal.
func TestJobsRunNow(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	later := s.enqueue(emailKind, `{"user_id": 1}`, "--delay", "1h")
	running := runningJob(t, s)
	ids := func(n int64) string { return strconv.FormatInt(n, 10) }
	if j := jobJSONOf(t, s, later); !j.Scheduled {
		t.Fatalf("the delayed job is not scheduled: %+v", j)
	}
	r := s.run("jobs", "run-now", ids(later), ids(running), "--reason", "customer is on the phone")
	wantError(t, r, ExitFailure, "job "+ids(running)+" is running already")
	if !strings.Contains(r.stdout, "job "+ids(later)+": due now") {
		t.Fatalf("run-now printed:\n%s", r.stdout)
	}
	if j := jobJSONOf(t, s, later); j.Scheduled || j.State != "available" {
		t.Fatalf("after run-now the job is %s, scheduled %v; want due now", j.State, j.Scheduled)
	}
}

func jobJSONOf(t *testing.T, s *setup, id int64) jobJSON {
	t.Helper()
	var j jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "show", strconv.FormatInt(id, 10), "--json").stdout), &j); err != nil {
		t.Fatal(err)
	}
	return j
}
