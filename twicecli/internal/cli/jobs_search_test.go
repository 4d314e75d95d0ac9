package cli

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// onEveryDatabase runs test on a SQLite setup and, when
// TWICE_TEST_POSTGRES and TWICE_TEST_MYSQL are set, on a PostgreSQL and a
// MySQL one.
func onEveryDatabase(t *testing.T, test func(t *testing.T, s *setup)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, newSetup(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, newPostgresSetup(t))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		test(t, newMySQLSetup(t))
	})
}

// storeOf opens the setup's database as a store, closed when the test ends.
func storeOf(t *testing.T, s *setup) twicestore.Store {
	t.Helper()
	store, err := (&cli{db: s.db}).openStore(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// insertJob stores a job of kind with a correlation id and metadata.
func insertJob(t *testing.T, store twicestore.Store, kind, corr string, md map[string]string) int64 {
	t.Helper()
	res, err := store.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: kind, Queue: "default", Args: []byte(`{}`), MessageID: uuid.NewString(), Key: uuid.NewString(),
		CorrelationID: corr, MaxAttempts: 3, Metadata: md, RunAt: time.Now(), CreatedAt: time.Now(),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Jobs[0].Job.ID
}

// listedIDs runs a --json listing and returns its ids.
func listedIDs(t *testing.T, s *setup, args ...string) []int64 {
	t.Helper()
	r := s.ok(append([]string{"jobs", "--json"}, args...)...)
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
		t.Fatalf("jobs --json %v: %v\n%s", args, err, r.stdout)
	}
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestJobsByCorrelationIDAndMetadata: jobs lists and the bulk actions
// select by --correlation-id and --meta (every pair must match); a --meta
// that is not key=value, or bad text, is a usage error that changes
// nothing.
func TestJobsByCorrelationIDAndMetadata(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, func(t *testing.T, s *setup) {
		store := storeOf(t, s)
		const kind = "crm.contact-sync.v1"
		a := insertJob(t, store, kind, "req-1", map[string]string{"tenant": "acme", "region": "eu"})
		b := insertJob(t, store, kind, "req-1", map[string]string{"tenant": "acme"})
		c := insertJob(t, store, kind, "req-2", map[string]string{"tenant": "globex", "region": "eu"})
		d := insertJob(t, store, kind, "req-1", nil)

		for _, tc := range []struct {
			args []string
			want []int64
		}{
			{[]string{"--correlation-id", "req-1"}, []int64{d, b, a}},
			{[]string{"--meta", "tenant=acme"}, []int64{b, a}},
			{[]string{"--meta", "tenant=acme", "--meta", "region=eu"}, []int64{a}},
			{[]string{"--meta", "region=eu", "--correlation-id", "req-2"}, []int64{c}},
			{[]string{"--meta", "tenant=a=b"}, nil}, // the value is all after the first =
			{[]string{"--correlation-id", "req-9"}, nil},
		} {
			if got := listedIDs(t, s, tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("jobs %v = %v, want %v", tc.args, got, tc.want)
			}
		}
		r := s.ok("jobs", "--meta", "tenant=acme")
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 {
			t.Errorf("jobs --meta table:\n%s", r.stdout)
		}

		before := jobsOf(t, store)
		for _, tc := range []struct {
			args  []string
			wants []string
		}{
			{[]string{"jobs", "--meta", "tenant"}, []string{"--meta", `pair "tenant" has no '='`, "give key=value"}},
			{[]string{"jobs", "--meta", "=acme"}, []string{"--meta", "no key before '='"}},
			{[]string{"jobs", "--meta", "tenant=acme", "--meta", "tenant=globex"}, []string{"given twice"}},
			{[]string{"jobs", "--correlation-id", "req\x00"}, []string{"--correlation-id", "NUL"}},
			{[]string{"jobs", "--meta", "tenant=" + strings.Repeat("x", 600)}, []string{`metadata filter "tenant"`, "limit"}},
			{[]string{"jobs", "cancel", "--all", "--meta", "tenant", "--reason", "x"}, []string{"give key=value"}},
			{[]string{"jobs", "retry", "--all", "--correlation-id", "\xff", "--reason", "x"}, []string{"--correlation-id", "not UTF-8"}},
		} {
			wantError(t, s.run(tc.args...), ExitUsage, tc.wants...)
		}
		if after := jobsOf(t, store); !slices.Equal(after, before) {
			t.Errorf("refused commands changed jobs:\n%v\nwant\n%v", after, before)
		}

		// The bulk actions take the same filters.
		r = s.ok("jobs", "cancel", "--all", "--meta", "tenant=acme", "--reason", "tenant left")
		for _, id := range []int64{a, b} {
			if !strings.Contains(r.stdout, strconv.FormatInt(id, 10)) {
				t.Errorf("cancel --meta tenant=acme does not report job %d:\n%s", id, r.stdout)
			}
		}
		if got := listedIDs(t, s, "--state", "cancelled"); !slices.Equal(got, []int64{b, a}) {
			t.Errorf("cancelled after cancel --meta tenant=acme: %v, want [%d %d]", got, b, a)
		}
		s.ok("jobs", "retry", "--all", "--state", "cancelled", "--correlation-id", "req-1", "--meta", "region=eu", "--reason", "back")
		if got := listedIDs(t, s, "--state", "cancelled"); !slices.Equal(got, []int64{b}) {
			t.Errorf("cancelled after retry --correlation-id req-1 --meta region=eu: %v, want [%d]", got, b)
		}
		s.ok("jobs", "delete", "--all", "--state", "cancelled", "--correlation-id", "req-1")
		if got := listedIDs(t, s, "--correlation-id", "req-1"); !slices.Equal(got, []int64{d, a}) {
			t.Errorf("req-1 after delete --state cancelled --correlation-id req-1: %v, want [%d %d]", got, d, a)
		}
	})
}

// jobsOf lists every job as id, state, for a before/after comparison.
func jobsOf(t *testing.T, store twicestore.Store) []string {
	t.Helper()
	res, err := store.JobList(t.Context(), &twicestore.JobListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range res.Jobs {
		out = append(out, strconv.FormatInt(j.ID, 10)+" "+string(j.State))
	}
	return out
}

// TestJobsShowComposition: jobs show prints a job's output, its steps
// with their status, its batch's counters and the jobs its completion
// inserted; --json carries the same.
func TestJobsShowComposition(t *testing.T) {
	t.Parallel()
	onEveryDatabase(t, func(t *testing.T, s *setup) {
		ctx := t.Context()
		store := storeOf(t, s)
		now := time.Now()
		job := func(kind string) *twicestore.JobInsertParams {
			return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MessageID: uuid.NewString(),
				Key: uuid.NewString(), CorrelationID: uuid.NewString(), MaxAttempts: 3, RunAt: now, CreatedAt: now}
		}
		b, err := store.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: job("invoice.done.v1"),
			Jobs: []*twicestore.JobInsertParams{job("invoice.render.v1"), job("invoice.render.v1")}, CreatedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		f, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"invoice.render.v1"},
			Limit: 1, Node: "n1", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || len(f.Jobs) != 1 {
			t.Fatalf("fetch: %v, %v", f, err)
		}
		j := f.Jobs[0]
		for _, st := range []*twicestore.StepParams{
			{Handler: j.Kind, Key: j.Key, Step: "upload", Strategy: "claim-after", JobID: j.ID, Epoch: j.Epoch, Done: true, Receipt: []byte(`"s3://7.pdf"`)},
			{Handler: j.Kind, Key: j.Key, Step: "charge", Strategy: "claim-before", JobID: j.ID, Epoch: j.Epoch},
		} {
			if _, err := store.StepClaim(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
			State: twicetype.JobStateCompleted, FinishedAt: now, Output: []byte(`{"pdf":"s3://7.pdf"}`),
			Children: []*twicestore.JobInsertParams{job("invoice.mail.v1")}}}}); err != nil {
			t.Fatal(err)
		}
		id := strconv.FormatInt(j.ID, 10)

		// The team's binary, and the stock one, which registers no kind.
		for name, r := range map[string]result{"team": s.ok("jobs", "show", id), "stock": runStock(t, ctx, "jobs", "show", id, "--db", s.db)} {
			for _, want := range []string{
				"output\n", `"pdf": "s3://7.pdf"`,
				"steps (2, handler invoice.render.v1)", "charge  uncertain", "upload  done", `receipt "s3://7.pdf"`, "settle the step",
				"batch " + strconv.FormatInt(b.Batch.ID, 10) + "  running: 1 of 2 completed, 1 pending, 0 dead, 0 cancelled",
				"children (1, inserted by this job's completion)", "invoice.mail.v1  available",
			} {
				if r.code != ExitOK || !strings.Contains(r.stdout, want) {
					t.Errorf("%s: jobs show (exit %d) does not print %q:\n%s%s", name, r.code, want, r.stdout, r.stderr)
				}
			}
		}

		r := s.ok("jobs", "show", id, "--json")
		var got struct {
			ID      int64           `json:"id"`
			State   string          `json:"state"`
			Output  json.RawMessage `json:"output"`
			Handler string          `json:"handler"`
			Steps   []stepJSON      `json:"steps"`
			Batch   *batchJSON      `json:"batch"`
			Child   []childJSON     `json:"children"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("jobs show --json: %v\n%s", err, r.stdout)
		}
		if got.ID != j.ID || got.State != "completed" || compact(t, got.Output) != `{"pdf":"s3://7.pdf"}` || got.Handler != j.Kind ||
			len(got.Steps) != 2 || got.Steps[0].Name != "charge" || got.Steps[0].Status != "uncertain" ||
			got.Steps[1].Status != "done" || string(got.Steps[1].Receipt) != `"s3://7.pdf"` ||
			got.Batch == nil || got.Batch.ID != b.Batch.ID || got.Batch.Completed != 1 || got.Batch.Pending != 1 ||
			len(got.Child) != 1 || got.Child[0].Kind != "invoice.mail.v1" {
			t.Errorf("jobs show --json = %+v\n%s", got, r.stdout)
		}

		// A plain job's detail has empty lists, not nulls.
		r = s.ok("jobs", "show", strconv.FormatInt(b.Jobs[1].Job.ID, 10), "--json")
		if !strings.Contains(r.stdout, `"steps": []`) || !strings.Contains(r.stdout, `"children": []`) || strings.Contains(r.stdout, `"output"`) {
			t.Errorf("jobs show --json of a waiting batch job:\n%s", r.stdout)
		}
	})
}
