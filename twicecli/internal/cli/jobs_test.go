package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var enqueuedID = regexp.MustCompile(`^enqueued job (\d+) `)

// enqueue enqueues through the CLI and returns the new job's id.
func (s *setup) enqueue(args ...string) int64 {
	s.t.Helper()
	r := s.ok(append([]string{"enqueue"}, args...)...)
	m := enqueuedID.FindStringSubmatch(r.stdout)
	if m == nil {
		s.t.Fatalf("enqueue printed %q, want \"enqueued job N ...\"", r.stdout)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

func TestEnqueueListShow(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	email := s.enqueue(emailKind, `{"user_id": 42}`, "--priority", "3", "--max-attempts", "7")
	credit := s.enqueue("balance.credit.v1", `{"credit_id": 9, "user_id": 42, "amount_cents": 500}`,
		"--queue", "bulk", "--delay", "1h", "--unique-key", "credit-9")

	t.Run("duplicate", func(t *testing.T) {
		r := s.ok("enqueue", "balance.credit.v1", `{"credit_id": 9, "user_id": 42, "amount_cents": 500}`, "--unique-key", "credit-9")
		if want := fmt.Sprintf("duplicate of job %d", credit); !strings.HasPrefix(r.stdout, want) {
			t.Errorf("stdout %q, want it to start with %q", r.stdout, want)
		}
		if n := len(jobsSnapshot(t, s.db)); n != 2 {
			t.Errorf("%d jobs stored, want 2", n)
		}
	})

	t.Run("list table", func(t *testing.T) {
		r := s.ok("jobs")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
			t.Fatalf("table:\n%s", r.stdout)
		}
		for i, want := range [][]string{
			{strconv.FormatInt(credit, 10), "balance.credit.v1", "bulk", "scheduled", "0/20"}, // --delay 1h: due later
			{strconv.FormatInt(email, 10), emailKind, "critical", "available", "0/7"},
		} {
			if got := strings.Fields(lines[i+1])[:5]; !reflect.DeepEqual(got, want) {
				t.Errorf("row %d = %q, want %q", i+1, got, want)
			}
		}
	})

	t.Run("list json with filters", func(t *testing.T) {
		r := s.ok("jobs", "--json", "--kind", emailKind, "--state", "available")
		var jobs []jobJSON
		if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
			t.Fatalf("jobs --json is not JSON: %v\n%s", err, r.stdout)
		}
		if len(jobs) != 1 || jobs[0].ID != email || jobs[0].Priority != 3 || compact(t, jobs[0].Args) != `{"user_id":42}` {
			t.Errorf("jobs --json = %+v", jobs)
		}
		r = s.ok("jobs", "--json", "--queue", "default", "--state", "dead")
		if strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("empty listing = %q, want []", r.stdout)
		}
		r = s.ok("jobs", "--limit", "1")
		if !strings.Contains(r.stderr, fmt.Sprintf("--before %d", credit)) {
			t.Errorf("a full page does not say how to get the next: %q", r.stderr)
		}
		r = s.ok("jobs", "--before", strconv.FormatInt(credit, 10), "--json")
		if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 || jobs[0].ID != email {
			t.Errorf("--before %d = %s (%v)", credit, r.stdout, err)
		}
	})

	t.Run("show", func(t *testing.T) {
		var j jobJSON
		r := s.ok("jobs", "show", strconv.FormatInt(credit, 10), "--json")
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
			t.Fatalf("jobs show --json is not JSON: %v\n%s", err, r.stdout)
		}
		// The credit's idempotency key is its credit id, however it was enqueued.
		if j.Key != "9" || j.UniqueKey != "credit-9" || j.MessageID == "" || j.CorrelationID == "" || !j.ArgsTypeKnown {
			t.Errorf("envelope = %+v", j)
		}
		if d := time.Until(j.RunAt); d < 59*time.Minute || d > time.Hour {
			t.Errorf("run_at is %s from now, want 1h", d)
		}
		text := s.ok("jobs", "show", strconv.FormatInt(credit, 10)).stdout
		for _, want := range []string{"message id", j.MessageID, "key", "correlation id", j.CorrelationID,
			"epoch", "attempt         0 of 20", `"amount_cents": 500`, "errors (0)"} {
			if !strings.Contains(text, want) {
				t.Errorf("jobs show does not show %q:\n%s", want, text)
			}
		}
		wantError(t, s.run("jobs", "show", "999"), ExitUsage, "job 999: job not found")
	})
}

// deadJobs stores jobs and dead-letters them through the store, the way a
// worker does: fetched under a lease, then finished dead with an error.
func deadJobs(t *testing.T, path string, n int) []int64 {
	t.Helper()
	ctx := t.Context()
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	now := time.Now()
	var params []*twicestore.JobInsertParams
	for i := range n {
		params = append(params, &twicestore.JobInsertParams{
			Kind: "ads.image-watermark.v1", Queue: "bulk", Args: fmt.Appendf(nil, `{"image_id":%d}`, i+1),
			MessageID: fmt.Sprintf("msg-%d", i), Key: fmt.Sprintf("msg-%d", i), MaxAttempts: 3, RunAt: now, CreatedAt: now,
		})
	}
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	fetched, err := store.JobFetch(ctx, &twicestore.JobFetchParams{
		Queue: "bulk", Kinds: []string{"ads.image-watermark.v1"}, Limit: n, Node: "test", Now: now, LeaseUntil: now.Add(time.Minute),
	})
	if err != nil || len(fetched.Jobs) != n {
		t.Fatalf("fetched %d jobs (%v), want %d", len(fetched.Jobs), err, n)
	}
	var (
		outcomes []*twicestore.JobOutcome
		ids      []int64
	)
	for _, j := range fetched.Jobs {
		ids = append(ids, j.ID)
		outcomes = append(outcomes, &twicestore.JobOutcome{
			ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead, FinishedAt: now,
			Error: &twicetype.AttemptError{Attempt: 1, At: now, Error: "panic: watermark font missing", Stack: "goroutine 7 [running]:\nmain.watermark()"},
		})
	}
	if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
		t.Fatal(err)
	}
	return ids
}

func jobState(t *testing.T, s *setup, id int64) twicetype.JobState {
	t.Helper()
	var j jobJSON
	r := s.ok("jobs", "show", strconv.FormatInt(id, 10), "--json")
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	return j.State
}

func TestDLQ(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	live := s.enqueue(emailKind, `{"user_id": 1}`)
	dead := deadJobs(t, s.db, 4)
	id := func(i int) string { return strconv.FormatInt(dead[i], 10) }

	r := s.ok("dlq", "ls")
	if strings.Count(r.stdout, "dead") != 4 || strings.Contains(r.stdout, emailKind) {
		t.Errorf("dlq ls:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "panic: watermark font missing") {
		t.Errorf("dlq ls does not show the last error:\n%s", r.stdout)
	}
	show := s.ok("jobs", "show", id(0)).stdout
	for _, want := range []string{"errors (1)", "attempt 1 at", "panic: watermark font missing", "goroutine 7 [running]:", "main.watermark()"} {
		if !strings.Contains(show, want) {
			t.Errorf("jobs show of a dead job does not show %q:\n%s", want, show)
		}
	}

	r = s.ok("dlq", "retry", id(0))
	if r.stdout != "job "+id(0)+": retried\n" {
		t.Errorf("dlq retry: %q", r.stdout)
	}
	if st := jobState(t, s, dead[0]); st != twicetype.JobStateAvailable {
		t.Errorf("retried job is %s, want available", st)
	}
	var j jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "show", id(0), "--json").stdout), &j); err != nil || j.Attempt != 0 || len(j.Errors) != 1 {
		t.Errorf("retried job: attempt %d, %d errors (%v); want its attempts reset and its history kept", j.Attempt, len(j.Errors), err)
	}

	r = s.ok("dlq", "discard", id(1))
	if r.stdout != "job "+id(1)+": discarded\n" {
		t.Errorf("dlq discard: %q", r.stdout)
	}
	if st := jobState(t, s, dead[1]); st != twicetype.JobStateDiscarded {
		t.Errorf("discarded job is %s", st)
	}

	// Naming a job that is not dead: the others are still retried, and the
	// command fails saying why.
	r = s.run("dlq", "retry", id(2), strconv.FormatInt(live, 10), "999")
	wantError(t, r, ExitFailure, fmt.Sprintf("job %d is available: job is not dead", live), "job 999: job not found")
	if r.stdout != "job "+id(2)+": retried\n" {
		t.Errorf("partial retry printed %q", r.stdout)
	}
	wantError(t, s.run("dlq", "discard", id(1)), ExitFailure, "is discarded: job is not dead")

	// In bulk, narrowed: only dead jobs, never the discarded one.
	wantError(t, s.run("dlq", "retry", "--all", "--kind", emailKind), ExitUsage,
		"no jobs match the filters, so nothing changed: list them with 'twice dlq ls' and the same filters")
	r = s.ok("dlq", "retry", "--all", "--kind", "ads.image-watermark.v1", "--queue", "bulk")
	if r.stdout != "job "+id(3)+": retried\n" {
		t.Errorf("retry --all: %q", r.stdout)
	}
	if st := jobState(t, s, dead[1]); st != twicetype.JobStateDiscarded {
		t.Errorf("retry --all revived a discarded job: %s", st)
	}
	// A discarded job comes back when named.
	s.ok("dlq", "retry", id(1))
	if st := jobState(t, s, dead[1]); st != twicetype.JobStateAvailable {
		t.Errorf("named discarded job is %s after retry, want available", st)
	}
	if r := s.ok("dlq", "ls"); r.stdout != "no jobs match\n" {
		t.Errorf("dlq ls after retrying everything:\n%s", r.stdout)
	}
}

func TestOrphans(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := s.ok("orphans")
	if !strings.HasPrefix(r.stdout, "no orphaned kinds") {
		t.Errorf("orphans on an empty database: %q", r.stdout)
	}
	s.enqueue(emailKind, `{"user_id": 1}`)
	s.enqueue(emailKind, `{"user_id": 2}`)
	r = s.ok("orphans")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 2 || !reflect.DeepEqual(strings.Fields(lines[1])[:3], []string{emailKind, "critical", "2"}) {
		t.Errorf("orphans:\n%s", r.stdout)
	}
	// No live worker serves "critical" either: the queue is stranded.
	if !strings.Contains(r.stdout, "STRANDED QUEUE") || !strings.Contains(tableLine(t, r.stdout, "critical"), "2") {
		t.Errorf("orphans does not report the stranded queue:\n%s", r.stdout)
	}
	var out orphansJSON
	if err := json.Unmarshal([]byte(s.ok("orphans", "--json").stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Kinds) != 1 || out.Kinds[0].Kind != emailKind || out.Kinds[0].Count != 2 ||
		len(out.Queues) != 1 || out.Queues[0].Queue != "critical" || out.Queues[0].Count != 2 {
		t.Errorf("orphans --json = %+v", out)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"user_id":7,"reset_token":"s3cr3t","note":"hi"}`)
	got, names := ops.Redact(raw, []string{"reset_token", "absent"})
	if string(got) != `{"note":"hi","reset_token":"[redacted]","user_id":7}` || !reflect.DeepEqual(names, []string{"reset_token"}) {
		t.Errorf("redact = %s, %v", got, names)
	}
	if got, names := ops.Redact(raw, nil); string(got) != string(raw) || names != nil {
		t.Errorf("redact with no sensitive fields changed the args: %s", got)
	}
	if got, _ := ops.Redact([]byte(`[1]`), []string{"x"}); string(got) != `[1]` {
		t.Errorf("redact of a non-object = %s", got)
	}
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestEnqueueCataloguedKind (issue 11 items 1 and 5): a kind this binary
// does not register but a worker published to the catalog (its worker
// stopped since) is enqueued with its args checked against the catalogued
// fields, and shown with its sensitive fields redacted; a kind in no
// catalog, or a queue nobody serves, needs --force; bad input changes
// nothing.
func TestEnqueueCataloguedKind(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	const kind = "pdf.cv.v1"
	publishCatalog(t, s, "pdf-worker", time.Now().Add(-time.Hour), twicetype.KindInfo{
		Kind: kind, Queue: "documents", MaxAttempts: 5,
		Args: []twicetype.ArgField{{Name: "cv_id", Type: twicetype.ArgTypeInteger}, {Name: "reset_token", Type: twicetype.ArgTypeString, Sensitive: true}},
	})
	before := jobsSnapshot(t, s.db)
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{kind, `{"cv_id": 3, "email": "a@example.com"}`}, []string{`"email"`}},
		{[]string{kind, `{"cv_id": "3"}`}, []string{`"cv_id"`, "integer"}},
		{[]string{kind, `{"cv_id": 3, "pad": "` + strings.Repeat("x", 3000) + `"}`}, []string{"2048-byte limit"}},
		{[]string{"pdf.vc.v1", `{"cv_id": 3}`}, []string{"in no catalog", "did you mean pdf.cv.v1?", "--force"}},
		{[]string{"pdf.other.v1", `{"password": "x"}`, "--force"}, []string{"password"}},
		{[]string{kind, `{"cv_id": 3}`, "--queue", "documnets"}, []string{"no live worker serves it", "did you mean documents?", "--force"}},
		{[]string{kind, `{"cv_id": 3}`, "--run-at", "tomorrow"}, []string{"--run-at"}},
		{[]string{kind, `{"cv_id": 3}`, "--run-at", "2030-01-01T00:00:00Z", "--delay", "1m"}, []string{"exclude each other"}},
	} {
		wantError(t, s.run(append([]string{"enqueue"}, tc.args...)...), ExitUsage, tc.wants...)
	}
	sameJobs(t, s.db, before)

	id := s.enqueue(kind, `{"cv_id": 3, "reset_token": "s3cr3t"}`, "--run-at", "2030-01-01T00:00:00Z")
	other := s.enqueue("pdf.other.v1", `{"doc_id": 4}`, "--force", "--queue", "nowhere")
	show := s.ok("jobs", "show", strconv.FormatInt(id, 10)).stdout
	if strings.Contains(show, "s3cr3t") || !strings.Contains(show, `"reset_token": "[redacted]"`) || !strings.Contains(show, `"cv_id": 3`) {
		t.Errorf("jobs show of a catalogued kind does not redact its sensitive field:\n%s", show)
	}
	if !strings.Contains(show, "scheduled (available from") || !strings.Contains(show, "documents") {
		t.Errorf("jobs show of a job due in 2030:\n%s", show)
	}
	var jobs []jobJSON
	out := s.ok("jobs", "--json").stdout
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "s3cr3t") || len(jobs) != 2 {
		t.Fatalf("jobs --json shows a sensitive field:\n%s", out)
	}
	for _, j := range jobs {
		switch j.ID {
		case id:
			if !j.ArgsTypeKnown || !j.Scheduled || !reflect.DeepEqual(j.ArgsRedacted, []string{"reset_token"}) || j.MaxAttempts != 5 {
				t.Errorf("catalogued job in --json: %+v", j)
			}
		case other:
			if !j.ArgsHidden || string(j.Args) != "null" || j.Queue != "nowhere" {
				t.Errorf("a kind known nowhere in --json: %+v (args %s)", j, j.Args)
			}
		}
	}
	show = s.ok("jobs", "show", strconv.FormatInt(other, 10)).stdout
	if !strings.Contains(show, "hidden: no live or past worker catalogued pdf.other.v1") || strings.Contains(show, "doc_id") {
		t.Errorf("jobs show of a kind known nowhere does not hide its args:\n%s", show)
	}
	show = s.ok("jobs", "show", strconv.FormatInt(other, 10), "--show-args").stdout
	if !strings.Contains(show, "nothing is redacted") || !strings.Contains(show, `"doc_id": 4`) {
		t.Errorf("jobs show --show-args of a kind known nowhere:\n%s", show)
	}
}

// TestJobsShowRedactsWhatAnyPublisherMarks (issue 20 #3): during a rolling
// deploy that tags a field sensitive, an old worker publishes the kind
// after a new one; the stock CLI still redacts the field in jobs show and
// jobs --json, by the rule the dashboard uses.
func TestJobsShowRedactsWhatAnyPublisherMarks(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	const kind = "pdf.cv.v1"
	now := time.Now()
	publish := func(node string, at time.Time, sensitive bool) {
		t.Helper()
		store, err := (&cli{db: s.db}).openStore(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = store.Close() }()
		if err := store.CatalogPublish(t.Context(), &twicestore.CatalogPublishParams{Node: node, Now: at,
			KeepSensitiveSince: at.Add(-time.Hour), Kinds: []twicetype.KindInfo{{Kind: kind, Queue: "documents",
				Args: []twicetype.ArgField{{Name: "cv_id", Type: twicetype.ArgTypeInteger},
					{Name: "reset_token", Type: twicetype.ArgTypeString, Sensitive: sensitive}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	publish("new-worker", now.Add(-time.Second), true)
	publish("old-worker", now, false)
	id := s.enqueue(kind, `{"cv_id": 3, "reset_token": "s3cr3t"}`)
	for _, args := range [][]string{{"jobs", "show", strconv.FormatInt(id, 10)}, {"jobs", "--json"}} {
		r := runStock(t, t.Context(), append(args, "--db", s.db)...)
		if r.code != ExitOK || strings.Contains(r.stdout, "s3cr3t") || !strings.Contains(r.stdout, "reset_token") {
			t.Errorf("stock %v after an old worker published over a new one: exit %d, shows the field the new one marks sensitive:\n%s%s",
				args, r.code, r.stdout, r.stderr)
		}
	}
}
