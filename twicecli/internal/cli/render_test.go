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

// TestUnreadableArgs (issue 12 item 11): one job whose stored args are not
// JSON does not fail 'jobs --json': that row says its args are
// unreadable, the others are listed; 'jobs show' says so too.
func TestUnreadableArgs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	good := s.enqueue(emailKind, `{"user_id": 1}`)
	bad := s.enqueue(emailKind, `{"user_id": 2}`)
	db := openRW(t, s.db)
	if _, err := db.ExecContext(t.Context(), `UPDATE twice_jobs SET args = ? WHERE id = ?`, []byte("{\"user_id\": 2, \xff"), bad); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	r := s.ok("jobs", "--json")
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 2 {
		t.Fatalf("jobs --json with one unreadable row: %v, %d jobs\n%s", err, len(jobs), r.stdout)
	}
	for _, j := range jobs {
		switch j.ID {
		case bad:
			if !j.ArgsUnreadable || string(j.Args) != "null" {
				t.Errorf("the unreadable row: %+v", j)
			}
		case good:
			if j.ArgsUnreadable || compact(t, j.Args) != `{"user_id":1}` {
				t.Errorf("the readable row: %+v", j)
			}
		}
	}
	show := s.ok("jobs", "show", strconv.FormatInt(bad, 10)).stdout
	if !strings.Contains(show, "unreadable: the 16 stored bytes are not valid JSON") {
		t.Errorf("jobs show of unreadable args:\n%s", show)
	}
	if r := s.ok("jobs", "show", strconv.FormatInt(bad, 10), "--json"); !strings.Contains(r.stdout, `"args_unreadable": true`) {
		t.Errorf("jobs show --json of unreadable args:\n%s", r.stdout)
	}
}

// TestListingsShowAnErrorsFirstLine (issue 12 item 7): with jobs that
// failed with a huge multi-line error, 'jobs' and 'dlq ls' show a short
// first line, 'jobs --json' a short last_error and no error history, and
// 'jobs show' the stored text.
func TestListingsShowAnErrorsFirstLine(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	store, err := twicesqlite.Open(t.Context(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	huge := "upstream said no\n" + strings.Repeat("a line of the upstream's 500 page\n", 400)
	now := time.Now()
	var ids []int64
	for i := range 5 {
		res, err := store.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
			Kind: "ads.image-watermark.v1", Queue: "bulk", Args: []byte(`{"image_id":` + strconv.Itoa(i) + `}`),
			MessageID: "m" + strconv.Itoa(i), Key: "m" + strconv.Itoa(i), MaxAttempts: 1, RunAt: now, CreatedAt: now,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Jobs[0].Job.ID)
	}
	fetched, err := store.JobFetch(t.Context(), &twicestore.JobFetchParams{Queue: "bulk", Kinds: []string{"ads.image-watermark.v1"},
		Limit: 5, Node: "test", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != 5 {
		t.Fatalf("fetched %d (%v)", len(fetched.Jobs), err)
	}
	var outcomes []*twicestore.JobOutcome
	for _, j := range fetched.Jobs {
		outcomes = append(outcomes, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead, FinishedAt: now,
			Error: &twicetype.AttemptError{Attempt: 1, At: now, Error: huge}})
	}
	if _, err := store.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()

	for _, args := range [][]string{{"jobs"}, {"dlq", "ls"}} {
		out := s.ok(args...).stdout
		if strings.Count(out, "upstream said no …") != 5 || strings.Contains(out, "500 page") || len(out) > 2000 {
			t.Errorf("%q shows more than the errors' first lines (%d bytes):\n%s", args, len(out), out)
		}
	}
	out := s.ok("jobs", "--json").stdout
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(out) > 10000 || len(jobs) != 5 || jobs[0].LastError != "upstream said no …" || jobs[0].ErrorCount != 1 || jobs[0].Errors != nil {
		t.Errorf("jobs --json is %d bytes; first job %+v", len(out), jobs[0])
	}
	show := s.ok("jobs", "show", strconv.FormatInt(ids[0], 10)).stdout
	if !strings.Contains(show, "a line of the upstream's 500 page") {
		t.Errorf("jobs show does not show the stored error text")
	}
}

func TestFirstLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 10, ""},
		{"short", 10, "short"},
		{"\n\n  first\nsecond", 20, "first …"},
		{"0123456789abc", 10, "012345678…"},
		{"0123456789abc\nmore", 10, "012345678…"},
		{"héllo wörld", 5, "héll…"},
	} {
		if got := firstLine(tc.in, tc.n); got != tc.want {
			t.Errorf("firstLine(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
