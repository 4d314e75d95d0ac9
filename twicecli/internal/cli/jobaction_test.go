package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// runningJob leases one job of the setup's watermark kind, as a worker on
// node "test" would, and returns its id.
func runningJob(t *testing.T, s *setup) int64 {
	t.Helper()
	id := s.enqueue("ads.image-watermark.v1", `{"image_id": 77}`)
	store, err := twicesqlite.Open(t.Context(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	now := time.Now()
	res, err := store.JobFetch(t.Context(), &twicestore.JobFetchParams{
		Queue: "bulk", Kinds: []string{"ads.image-watermark.v1"}, Limit: 1, Node: "test", Now: now, LeaseUntil: now.Add(time.Minute),
	})
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("fetched %v (%v), want job %d", res, err, id)
	}
	return id
}

// TestJobsCancelDeleteRetry (issue 11 item 4): per-job result lines, --all
// with filters, --json, and bad input (a cancel of a finished job, a retry
// of a running one, a delete of a running one) refused with one line and
// exit 1, the others still acted on.
func TestJobsCancelDeleteRetry(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	waiting := s.enqueue(emailKind, `{"user_id": 1}`)
	later := s.enqueue(emailKind, `{"user_id": 2}`, "--delay", "1h")
	running := runningJob(t, s)
	dead := deadJobs(t, s.db, 1)[0]

	// A running job gets a cancel request; a waiting one is cancelled.
	r := s.ok("jobs", "cancel", id(waiting), id(running), "--reason", "customer withdrew", "--by", "ops@host")
	want := "job " + id(waiting) + ": cancelled\njob " + id(running) + ": cancel requested: it is running, and ends cancelled unless it finishes first\n"
	if r.stdout != want {
		t.Errorf("cancel printed:\n%s\nwant:\n%s", r.stdout, want)
	}
	if st := jobState(t, s, waiting); st != "cancelled" {
		t.Errorf("cancelled job is %s", st)
	}
	if st := jobState(t, s, running); st != "running" {
		t.Errorf("a running job's cancel is a request: it is %s", st)
	}
	for _, n := range []int64{waiting, running} {
		var j jobJSON
		if err := json.Unmarshal([]byte(s.ok("jobs", "show", id(n), "--json").stdout), &j); err != nil {
			t.Fatal(err)
		}
		if j.Cancel == nil || j.Cancel.By != "ops@host" || j.Cancel.Reason != "customer withdrew" {
			t.Errorf("job %d's cancel request in --json: %+v", n, j.Cancel)
		}
	}
	if show := s.ok("jobs", "show", id(running)).stdout; !strings.Contains(show, `cancel requested (it ends cancelled unless it finishes first) by ops@host`) {
		t.Errorf("jobs show of a running job with a cancel request:\n%s", show)
	}
	if l := tableLine(t, s.ok("jobs").stdout, id(running)); !strings.Contains(l, "cancelling") {
		t.Errorf("jobs lists a running job with a cancel request as %q", l)
	}

	// Bad input: one line, exit 1, nothing changed.
	before := jobsSnapshot(t, s.db)
	wantError(t, s.run("jobs", "cancel", id(dead)), ExitFailure, "job "+id(dead)+" is dead", "nothing to cancel")
	wantError(t, s.run("jobs", "retry", id(running)), ExitFailure, "job "+id(running), "running", "cancel it first")
	wantError(t, s.run("jobs", "delete", id(running)), ExitFailure, "running")
	wantError(t, s.run("jobs", "cancel", "999"), ExitUsage, "job 999: job not found")
	wantError(t, s.run("jobs", "cancel", id(later), "--kind", "ads.image-watermark.v1"), ExitFailure, "does not match the filters")
	for _, args := range [][]string{
		{"jobs", "cancel"},
		{"jobs", "cancel", "1", "--all"},
		{"jobs", "delete", "--all"},
		{"jobs", "cancel", "--all", "--due", "--scheduled"},
		{"jobs", "cancel", "--all", "--state", "dead", "--due"},
		{"jobs", "retry", "x"},
		{"jobs", "cancel", "--all", "--state", "gone"},
	} {
		wantError(t, s.run(args...), ExitUsage, "--help")
	}
	sameJobs(t, s.db, before)

	// --all with filters: only the scheduled email.
	r = s.ok("jobs", "cancel", "--all", "--scheduled", "--kind", emailKind, "--json")
	var results []jobResultJSON
	if err := json.Unmarshal([]byte(r.stdout), &results); err != nil {
		t.Fatalf("cancel --json: %v\n%s", err, r.stdout)
	}
	if len(results) != 1 || results[0].ID != later || !results[0].Changed || results[0].State != "cancelled" {
		t.Errorf("cancel --all --scheduled --json = %+v", results)
	}

	// Retry: the cancelled and the dead jobs, one refusal not stopping them.
	r = s.run("jobs", "retry", id(waiting), id(dead), id(running))
	wantError(t, r, ExitFailure, "could not retry 1 of the jobs", "job "+id(running))
	if r.stdout != "job "+id(waiting)+": retried\njob "+id(dead)+": retried\n" {
		t.Errorf("partial retry printed %q", r.stdout)
	}
	// Delete --all needs --state, and takes the filters.
	r = s.ok("jobs", "delete", "--all", "--state", "cancelled")
	if r.stdout != "job "+id(later)+": deleted\n" {
		t.Errorf("delete --all --state cancelled printed %q", r.stdout)
	}
	wantError(t, s.run("jobs", "show", id(later)), ExitUsage, "not found")
	// An --all that selects nothing is bad input: it changed nothing.
	wantError(t, s.run("jobs", "cancel", "--all", "--kind", emailKind, "--state", "running"), ExitUsage,
		"no jobs match the filters, so nothing changed", "'twice jobs' and the same filters")
	wantError(t, s.run("jobs", "retry", "--all", "--kind", emailKind, "--dry-run"), ExitUsage,
		"no jobs match the filters, so a retry would change nothing")
}

// TestJobsListFilters: --node, --due and --scheduled select as the admin
// API does; a listing's JSON carries only the first line of the last error.
func TestJobsListFilters(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	due := s.enqueue(emailKind, `{"user_id": 1}`)
	later := s.enqueue(emailKind, `{"user_id": 2}`, "--delay", "1h")
	running := runningJob(t, s)
	ids := func(args ...string) []int64 {
		var jobs []jobJSON
		if err := json.Unmarshal([]byte(s.ok(append([]string{"jobs", "--json"}, args...)...).stdout), &jobs); err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	for _, tc := range []struct {
		args []string
		want []int64
	}{
		{[]string{"--due"}, []int64{due}},
		{[]string{"--scheduled"}, []int64{later}},
		{[]string{"--node", "test"}, []int64{running}},
		{[]string{"--state", "running"}, []int64{running}},
	} {
		if got := ids(tc.args...); len(got) != len(tc.want) || got[0] != tc.want[0] {
			t.Errorf("jobs %q = %v, want %v", tc.args, got, tc.want)
		}
	}
	table := s.ok("jobs").stdout
	if !strings.Contains(tableLine(t, table, strconv.FormatInt(later, 10)), "scheduled") ||
		!strings.Contains(tableLine(t, table, strconv.FormatInt(due, 10)), "available") {
		t.Errorf("jobs does not tell scheduled from due:\n%s", table)
	}
}
