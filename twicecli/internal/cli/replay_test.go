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

// deadWith dead-letters the job id of kind in queue, after during has run
// on the store with the job running.
func deadWith(t *testing.T, s *setup, id int64, kind, queue string, during func(*twicesqlite.Store, *twicetype.JobRow)) {
	t.Helper()
	finishWith(t, s, id, kind, queue, twicetype.JobStateDead, during)
}

// finishWith finishes the job id of kind in queue in state, after during
// has run on the store with the job running.
func finishWith(t *testing.T, s *setup, id int64, kind, queue string, state twicetype.JobState, during func(*twicesqlite.Store, *twicetype.JobRow)) {
	t.Helper()
	ctx := t.Context()
	store, err := twicesqlite.Open(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	now := time.Now()
	res, err := store.JobFetch(ctx, &twicestore.JobFetchParams{
		Queue: queue, Kinds: []string{kind}, Limit: 1, Node: "test", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(res.Jobs) != 1 || res.Jobs[0].ID != id {
		t.Fatalf("fetched %v (%v), want job %d", res, err, id)
	}
	j := res.Jobs[0]
	if during != nil {
		during(store, j)
	}
	if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: j.ID, Epoch: j.Epoch, State: state, FinishedAt: now,
	}}}); err != nil {
		t.Fatal(err)
	}
}

// TestJobsRetryDryRun (issue 25 item 5): --dry-run prints the count and a
// sample per class and changes nothing; the real retry skips the
// uncertain job with a line saying how to settle it; --force without a
// reason is a usage error; --force with one retries it.
func TestJobsRetryDryRun(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	// A claim-after email whose marker exists: a no-op.
	noop := s.enqueue(emailKind, `{"user_id": 1}`)
	deadWith(t, s, noop, emailKind, "critical", func(st *twicesqlite.Store, j *twicetype.JobRow) {
		if _, err := st.MarkerClaim(t.Context(), &twicestore.MarkerParams{Handler: emailKind, Key: j.Key, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	})
	// A watermark (strategy none): it runs again.
	runs := s.enqueue("ads.image-watermark.v1", `{"image_id": 1}`)
	deadWith(t, s, runs, "ads.image-watermark.v1", "bulk", nil)
	// A watermark with a step claimed and no receipt: uncertain.
	uncertain := s.enqueue("ads.image-watermark.v1", `{"image_id": 2}`)
	deadWith(t, s, uncertain, "ads.image-watermark.v1", "bulk", func(st *twicesqlite.Store, j *twicetype.JobRow) {
		if _, err := st.StepClaim(t.Context(), &twicestore.StepParams{Handler: j.Kind, Key: j.Key, Step: "upload",
			Strategy: "none", JobID: j.ID, Epoch: j.Epoch}); err != nil {
			t.Fatal(err)
		}
	})

	before := jobsSnapshot(t, s.db)
	out := s.ok("jobs", "retry", "--all", "--dry-run").stdout
	for _, want := range []string{
		"a retry would take 3 jobs (dry run: nothing changed)",
		"no-op           1", "(jobs " + id(noop) + ")",
		"will-run        1", "(jobs " + id(runs) + ")",
		"uncertain       1", "(jobs " + id(uncertain) + ")",
		"blocked         0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs retry --dry-run printed:\n%s\nwithout %q", out, want)
		}
	}
	var js retryPreviewJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "retry", "--all", "--dry-run", "--json").stdout), &js); err != nil {
		t.Fatal(err)
	}
	if js.Total != 3 || len(js.Classes) != 5 || js.Classes[2].Class != "uncertain" || js.Classes[2].Count != 1 {
		t.Errorf("--dry-run --json = %+v", js)
	}
	wantError(t, s.run("jobs", "retry", "--all", "--dry-run", "--kind", "email.partner-verification.v1", "--state", "cancelled"), ExitUsage,
		"no jobs match the filters, so a retry would change nothing")
	wantError(t, s.run("jobs", "retry", "--all", "--force"), ExitUsage, "--force needs --reason")
	sameJobs(t, s.db, before)

	// The real retry: the uncertain job is skipped, the others retried.
	r := s.run("jobs", "retry", "--all")
	wantError(t, r, ExitFailure, "job "+id(uncertain), "effect may have happened", "--force --reason")
	for _, n := range []int64{noop, runs} {
		if !strings.Contains(r.stdout, "job "+id(n)+": retried\n") {
			t.Errorf("retry printed:\n%s\nwithout job %d retried", r.stdout, n)
		}
	}
	if st := jobState(t, s, uncertain); st != "dead" {
		t.Errorf("uncertain job is %s after a retry without --force, want dead", st)
	}
	if out := s.ok("jobs", "retry", id(uncertain), "--force", "--reason", "checked: no upload").stdout; out != "job "+id(uncertain)+": retried\n" {
		t.Errorf("forced retry printed %q", out)
	}
}

// TestJobsRetryCompleted (issue 25 item 5): completed jobs are replayed
// only when --state completed asks for them: by id alone the retry
// refuses, saying how; with --state completed the dry run classes them
// and the real retry replays them.
func TestJobsRetryCompleted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	claim := func(st *twicesqlite.Store, j *twicetype.JobRow) {
		if _, err := st.MarkerClaim(t.Context(), &twicestore.MarkerParams{Handler: emailKind, Key: j.Key, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	noop := s.enqueue(emailKind, `{"user_id": 1}`)
	finishWith(t, s, noop, emailKind, "critical", twicetype.JobStateCompleted, claim)
	runs := s.enqueue("ads.image-watermark.v1", `{"image_id": 1}`)
	finishWith(t, s, runs, "ads.image-watermark.v1", "bulk", twicetype.JobStateCompleted, nil)

	before := jobsSnapshot(t, s.db)
	wantError(t, s.run("jobs", "retry", id(noop)), ExitFailure, "job "+id(noop)+" is completed", "select state completed")
	out := s.ok("jobs", "retry", "--all", "--state", "completed", "--dry-run").stdout
	for _, want := range []string{
		"a retry would take 2 jobs (dry run: nothing changed)",
		"no-op           1", "(jobs " + id(noop) + ")",
		"will-run        1", "(jobs " + id(runs) + ")",
		"2 of them are completed: the same command without --dry-run replays them",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs retry --state completed --dry-run printed:\n%s\nwithout %q", out, want)
		}
	}
	sameJobs(t, s.db, before)

	out = s.ok("jobs", "retry", "--all", "--state", "completed").stdout
	if out != "job "+id(noop)+": retried\njob "+id(runs)+": retried\n" {
		t.Errorf("jobs retry --all --state completed printed %q", out)
	}
	for _, n := range []int64{noop, runs} {
		if st := jobState(t, s, n); st != "available" {
			t.Errorf("job %d is %s after the replay, want available", n, st)
		}
	}
}
