package twice_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// monthlyReportArgs is a plain kind of the admin tests, in a queue of its own.
type monthlyReportArgs struct {
	CustomerID int64 `json:"customer_id"`
}

func (monthlyReportArgs) Kind() string { return "report.monthly.v1" }

// chargeArgs is a fail-closed kind with a sensitive field.
type chargeArgs struct {
	ChargeID  int64   `json:"charge_id"`
	CardToken string  `json:"card_token" twice:"sensitive"`
	Lines     []int64 `json:"lines,omitempty"`
}

func (chargeArgs) Kind() string { return "billing.charge.v1" }

// adminRegistry registers the admin tests' kinds and a schedule.
func adminRegistry(t testing.TB) *twice.Registry {
	t.Helper()
	reg := twice.NewRegistry()
	nop := func(context.Context, *twice.Job[monthlyReportArgs]) error { return nil }
	twice.MustRegister(reg, twice.HandlerFunc[monthlyReportArgs](nop), &twice.KindOpts{Queue: "reports", MaxAttempts: 3})
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(context.Context, *twice.Job[chargeArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.ClaimBefore, FailClosed: true, Timeout: time.Minute})
	reg.MustSchedule("monthly-report", "0 3 1 * *", monthlyReportArgs{CustomerID: 1}, nil)
	return reg
}

// eachStore runs test as a subtest on SQLite and, when TWICE_TEST_POSTGRES
// is set, on PostgreSQL, each time on a fresh database.
func eachStore(t *testing.T, test func(t *testing.T, store twicestore.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, newStore(t))
	})
	t.Run("postgres", func(t *testing.T) {
		if os.Getenv(pgtest.EnvURL) == "" {
			t.Skip(pgtest.EnvURL + " is not set")
		}
		t.Parallel()
		u, _ := pgtest.Schema(t, "admin")
		s, err := twicepg.Open(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		test(t, s)
	})
}

// adminClient is a client that is never started: the admin API needs no
// worker.
func adminClient(t testing.TB, store twicestore.Store, reg *twice.Registry) *twice.Client {
	t.Helper()
	cfg := testConfig(reg)
	cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: "reports"}}
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustEnqueue(t testing.TB, c *twice.Client, args twice.Args, opts *twice.EnqueueOpts) *twicetype.JobRow {
	t.Helper()
	res, err := c.Enqueue(context.Background(), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.Job
}

func mustGet(t testing.TB, c *twice.Client, id int64) *twicetype.JobRow {
	t.Helper()
	row, err := c.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// leaseOne makes the job running, as a worker's fetch would, without a worker.
func leaseOne(t testing.TB, store twicestore.Store, queue string, kinds ...string) *twicetype.JobRow {
	t.Helper()
	now := time.Now()
	res, err := store.JobFetch(context.Background(), &twicestore.JobFetchParams{
		Queue: queue, Kinds: kinds, Limit: 1, Node: "test-node", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 {
		t.Fatalf("fetched %d jobs of %v in %q, want 1", len(res.Jobs), kinds, queue)
	}
	return res.Jobs[0]
}

// wantErr fails unless err matches every target.
func wantErr(t testing.TB, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %q does not match %q", err, target)
		}
	}
}

func TestAdminJobGetAndList(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))

		_, err := c.JobGet(ctx, 999)
		wantErr(t, err, twice.ErrJobNotFound, twice.ErrInvalidInput)

		due := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil)
		later := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 2}, &twice.EnqueueOpts{Delay: time.Hour})
		charge := mustEnqueue(t, c, chargeArgs{ChargeID: 3}, nil)
		running := leaseOne(t, store, twice.QueueDefault, charge.Kind)

		ids := func(p *twice.JobListParams) []int64 {
			t.Helper()
			res, err := c.JobList(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var out []int64
			for _, j := range res.Jobs {
				out = append(out, j.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			f    twice.JobFilter
			want []int64
		}{
			{"all, newest first", twice.JobFilter{}, []int64{charge.ID, later.ID, due.ID}},
			{"due", twice.JobFilter{Timing: twice.JobDue}, []int64{due.ID}},
			{"scheduled", twice.JobFilter{Timing: twice.JobScheduled}, []int64{later.ID}},
			{"kind", twice.JobFilter{Kind: "report.monthly.v1"}, []int64{later.ID, due.ID}},
			{"queue", twice.JobFilter{Queue: "reports", State: twicetype.JobStateAvailable}, []int64{later.ID, due.ID}},
			{"node", twice.JobFilter{Node: "test-node"}, []int64{running.ID}},
			{"running", twice.JobFilter{State: twicetype.JobStateRunning}, []int64{running.ID}},
			{"none", twice.JobFilter{State: twicetype.JobStateDead}, nil},
		} {
			if got := ids(&twice.JobListParams{JobFilter: tc.f}); !equalIDs(got, tc.want) {
				t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
			}
		}

		// Keyset pages: Next continues where the page ended; the last page
		// has none.
		page, err := c.JobList(ctx, &twice.JobListParams{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 2 || page.Next != later.ID {
			t.Fatalf("first page: %d jobs, next %d; want 2 and %d", len(page.Jobs), page.Next, later.ID)
		}
		page, err = c.JobList(ctx, &twice.JobListParams{Limit: 2, BeforeID: page.Next})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 || page.Jobs[0].ID != due.ID || page.Next != 0 {
			t.Fatalf("last page: %d jobs, next %d; want job %d alone and no next", len(page.Jobs), page.Next, due.ID)
		}

		for name, p := range map[string]*twice.JobListParams{
			"unknown state":         {JobFilter: twice.JobFilter{State: "stuck"}},
			"unknown timing":        {JobFilter: twice.JobFilter{Timing: "soon"}},
			"timing of a finished":  {JobFilter: twice.JobFilter{State: twicetype.JobStateCompleted, Timing: twice.JobDue}},
			"negative limit":        {Limit: -1},
			"negative continuation": {BeforeID: -5},
		} {
			_, err := c.JobList(ctx, p)
			if !errors.Is(err, twice.ErrInvalidInput) {
				t.Errorf("%s: error %v, want ErrInvalidInput", name, err)
			}
		}
	})
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAdminJobCancel(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		waiting := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, &twice.EnqueueOpts{Delay: time.Hour})
		charge := mustEnqueue(t, c, chargeArgs{ChargeID: 2}, nil)
		running := leaseOne(t, store, twice.QueueDefault, charge.Kind)

		res, err := c.JobCancel(ctx, &twice.JobActionParams{
			IDs: []int64{waiting.ID, running.ID, 999}, By: "ops@test", Reason: "customer left"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) != 3 {
			t.Fatalf("%d results, want 3: %+v", len(res.Jobs), res.Jobs)
		}
		byID := map[int64]twice.JobResult{}
		for _, j := range res.Jobs {
			byID[j.ID] = j
		}
		if r := byID[waiting.ID]; !r.Changed || r.State != twicetype.JobStateCancelled || r.Err != nil {
			t.Errorf("waiting job: %+v, want cancelled", r)
		}
		if r := byID[running.ID]; !r.Changed || !r.CancelRequested || r.State != twicetype.JobStateRunning {
			t.Errorf("running job: %+v, want a cancel request and still running", r)
		}
		if r := byID[999]; r.Changed || !errors.Is(r.Err, twice.ErrJobNotFound) {
			t.Errorf("unknown id: %+v, want ErrJobNotFound", r)
		}
		if got := res.Changed(); !equalIDs(got, []int64{waiting.ID, running.ID}) {
			t.Errorf("Changed = %v", got)
		}
		if !errors.Is(res.Err(), twice.ErrJobNotFound) {
			t.Errorf("Err = %v, want the unknown id's", res.Err())
		}
		row := mustGet(t, c, waiting.ID)
		if row.State != twicetype.JobStateCancelled || row.Cancel == nil || row.Cancel.By != "ops@test" ||
			!strings.Contains(row.Note, "customer left") || row.FinishedAt.IsZero() {
			t.Fatalf("cancelled job: state %s, cancel %+v, note %q, finished %v", row.State, row.Cancel, row.Note, row.FinishedAt)
		}

		// A second cancel of a finished job: a clear error, nothing changed.
		again, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{waiting.ID}, By: "someone else"})
		if err != nil {
			t.Fatal(err)
		}
		if r := again.Jobs[0]; r.Changed || !errors.Is(r.Err, twice.ErrJobFinished) || errors.Is(r.Err, twice.ErrInvalidInput) {
			t.Fatalf("second cancel: %+v, want ErrJobFinished (a state error)", r)
		}
		if after := mustGet(t, c, waiting.ID); after.Cancel.By != "ops@test" || !after.FinishedAt.Equal(row.FinishedAt) {
			t.Fatalf("second cancel changed the job: cancel %+v, finished %v", after.Cancel, after.FinishedAt)
		}

		// No selection is a usage error, not "every job".
		_, err = c.JobCancel(ctx, &twice.JobActionParams{Reason: "oops"})
		wantErr(t, err, twice.ErrInvalidInput)
		_, err = c.JobCancel(ctx, nil)
		wantErr(t, err, twice.ErrInvalidInput)

		// A filter selects: every scheduled report.
		more := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 3}, &twice.EnqueueOpts{Delay: time.Hour})
		due := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 4}, nil)
		res, err = c.JobCancel(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{Kind: "report.monthly.v1", Timing: twice.JobScheduled}})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Changed(); !equalIDs(got, []int64{more.ID}) {
			t.Fatalf("filtered cancel changed %v, want [%d]", got, more.ID)
		}
		if st := mustGet(t, c, due.ID).State; st != twicetype.JobStateAvailable {
			t.Fatalf("due job outside the filter is %s", st)
		}
	})
}

func TestAdminJobDelete(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		waiting := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil)
		charge := mustEnqueue(t, c, chargeArgs{ChargeID: 2}, nil)
		running := leaseOne(t, store, twice.QueueDefault, charge.Kind)

		res, err := c.JobDelete(ctx, &twice.JobActionParams{IDs: []int64{waiting.ID, running.ID}, By: "ops@test"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Jobs {
			switch r.ID {
			case waiting.ID:
				if !r.Changed || r.Err != nil {
					t.Errorf("waiting job: %+v, want deleted", r)
				}
			case running.ID:
				if r.Changed || !errors.Is(r.Err, twice.ErrJobRunning) {
					t.Errorf("running job: %+v, want ErrJobRunning", r)
				}
			}
		}
		_, err = c.JobGet(ctx, waiting.ID)
		wantErr(t, err, twice.ErrJobNotFound)
		if st := mustGet(t, c, running.ID).State; st != twicetype.JobStateRunning {
			t.Fatalf("refused delete changed the running job to %s", st)
		}
	})
}

func TestAdminJobRetry(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		waiting := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil)
		charge := mustEnqueue(t, c, chargeArgs{ChargeID: 2}, nil)
		running := leaseOne(t, store, twice.QueueDefault, charge.Kind)
		// Two cancelled jobs; the unique key of one is then taken by a new
		// job, so retrying it would make two live jobs with that key.
		a := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 3}, &twice.EnqueueOpts{UniqueKey: "month-3"})
		b := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 4}, nil)
		if _, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{a.ID, b.ID}}); err != nil {
			t.Fatal(err)
		}
		holder := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 3}, &twice.EnqueueOpts{UniqueKey: "month-3"})

		res, err := c.JobRetry(ctx, &twice.JobActionParams{IDs: []int64{waiting.ID, running.ID, a.ID, b.ID}, By: "ops@test"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[int64]error{waiting.ID: twice.ErrJobNotRetryable, running.ID: twice.ErrJobRunning, a.ID: twice.ErrUniqueConflict, b.ID: nil}
		if len(res.Jobs) != len(want) {
			t.Fatalf("%d results, want %d: %+v", len(res.Jobs), len(want), res.Jobs)
		}
		for _, r := range res.Jobs {
			w := want[r.ID]
			switch {
			case w == nil && (!r.Changed || r.State != twicetype.JobStateAvailable):
				t.Errorf("job %d: %+v, want retried", r.ID, r)
			case w != nil && (r.Changed || !errors.Is(r.Err, w)):
				t.Errorf("job %d: %+v, want %v", r.ID, r, w)
			}
		}
		if r := res.Jobs[2]; r.ID == a.ID && !strings.Contains(r.Err.Error(), "job "+strconv.FormatInt(holder.ID, 10)) {
			t.Errorf("conflict %q does not name the holder %d", r.Err, holder.ID)
		}
		if st := mustGet(t, c, a.ID).State; st != twicetype.JobStateCancelled {
			t.Fatalf("conflicting job is %s, want still cancelled", st)
		}
		if st := mustGet(t, c, running.ID).State; st != twicetype.JobStateRunning {
			t.Fatalf("running job is %s after a refused retry", st)
		}
	})
}

// TestAdminJobActionsTx: the Tx variants act in the caller's transaction:
// rolled back, nothing changed; committed, the action stands.
func TestAdminJobActionsTx(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		job := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil)

		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.JobCancelTx(ctx, tx.Unwrap(), &twice.JobActionParams{IDs: []int64{job.ID}})
		if err != nil || !res.Jobs[0].Changed {
			t.Fatalf("cancel in tx: %+v, %v", res, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if st := mustGet(t, c, job.ID).State; st != twicetype.JobStateAvailable {
			t.Fatalf("rolled-back cancel left the job %s", st)
		}

		tx, err = store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobCancelTx(ctx, tx.Unwrap(), &twice.JobActionParams{IDs: []int64{job.ID}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobRetryTx(ctx, tx.Unwrap(), &twice.JobActionParams{IDs: []int64{job.ID}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JobDeleteTx(ctx, tx.Unwrap(), &twice.JobActionParams{IDs: []int64{job.ID}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = c.JobGet(ctx, job.ID)
		wantErr(t, err, twice.ErrJobNotFound)

		_, err = c.JobCancelTx(ctx, nil, &twice.JobActionParams{IDs: []int64{job.ID}})
		wantErr(t, err, twice.ErrInvalidInput)
		_, err = c.JobCancelTx(ctx, "not a transaction", &twice.JobActionParams{IDs: []int64{job.ID}})
		wantErr(t, err, twicestore.ErrWrongTx)
	})
}

func TestAdminQueues(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		paused := func() map[string]twice.QueueInfo {
			t.Helper()
			qs, err := c.QueueList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]twice.QueueInfo{}
			for _, q := range qs {
				if q.Paused {
					out[q.Name] = q
				}
			}
			return out
		}

		// Bad input: a clear error, nothing paused.
		err := c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reprots", By: "ops@test"})
		wantErr(t, err, twice.ErrUnknownQueue, twice.ErrInvalidInput)
		if !strings.Contains(err.Error(), "reports") {
			t.Errorf("unknown-queue error %q does not list the known queues", err)
		}
		err = c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reports", Until: time.Now().Add(-time.Minute)})
		wantErr(t, err, twice.ErrInvalidInput)
		err = c.QueuePause(ctx, &twice.QueuePauseParams{})
		wantErr(t, err, twice.ErrInvalidInput)
		err = c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "Reports"})
		wantErr(t, err, twice.ErrInvalidInput)
		if !strings.Contains(err.Error(), `use "reports"`) {
			t.Errorf("bad queue name error %q does not say what to use", err)
		}
		_, err = c.QueueResume(ctx, &twice.QueueResumeParams{Queue: "nope"})
		wantErr(t, err, twice.ErrUnknownQueue)
		if p := paused(); len(p) != 0 {
			t.Fatalf("bad input paused %v", p)
		}

		// A queue known only by its jobs can be paused too.
		mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, &twice.EnqueueOpts{Queue: "side"})
		until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reports", Until: until, By: "ops@test", Reason: "migration"}); err != nil {
			t.Fatal(err)
		}
		if err := c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "side"}); err != nil {
			t.Fatal(err)
		}
		p := paused()
		if q, ok := p["reports"]; !ok || q.By != "ops@test" || q.Reason != "migration" || !q.Until.Equal(until) {
			t.Fatalf("reports: %+v, want paused by ops@test until %v", q, until)
		}
		if q := p["side"]; q.Due != 1 {
			t.Fatalf("side: %+v, want paused with its 1 due job", q)
		}

		res, err := c.QueueResume(ctx, &twice.QueueResumeParams{Queue: "reports", By: "ops@test"})
		if err != nil || !res.Resumed {
			t.Fatalf("resume: %+v, %v", res, err)
		}
		res, err = c.QueueResume(ctx, &twice.QueueResumeParams{Queue: "reports"})
		if err != nil || res.Resumed {
			t.Fatalf("second resume: %+v, %v; want nothing to resume", res, err)
		}

		// In a transaction: rolled back, no pause.
		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.QueuePauseTx(ctx, tx.Unwrap(), &twice.QueuePauseParams{Queue: "reports"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := paused()["reports"]; ok {
			t.Fatal("a rolled-back pause stands")
		}
		tx, err = store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.QueueResumeTx(ctx, tx.Unwrap(), &twice.QueueResumeParams{Queue: "side"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if p := paused(); len(p) != 0 {
			t.Fatalf("after resuming every queue: paused %v", p)
		}
	})
}

func TestAdminToggles(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		stored := func() []twicetype.Toggle {
			t.Helper()
			ts, err := c.ToggleList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return ts
		}

		// Bad input: nothing stored, no history.
		err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "billing.chrage.v1", Reason: "typo"})
		wantErr(t, err, twice.ErrUnknownKind, twice.ErrInvalidInput)
		if !strings.Contains(err.Error(), "did you mean billing.charge.v1?") {
			t.Errorf("error %q has no suggestion", err)
		}
		err = c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "billing.charge.v1", ExpiresAt: time.Now().Add(-time.Second)})
		wantErr(t, err, twice.ErrInvalidInput)
		err = c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "Not A Kind"})
		wantErr(t, err, twice.ErrInvalidInput)
		_, err = c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "billing.chrage.v1"})
		wantErr(t, err, twice.ErrUnknownKind, twice.ErrInvalidInput)
		_, err = c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1"})
		wantErr(t, err, twice.ErrInvalidInput)
		if ts := stored(); len(ts) != 0 {
			t.Fatalf("bad input stored %v", ts)
		}
		if h, err := c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "billing.charge.v1"}); err != nil || len(h.Changes) != 0 {
			t.Fatalf("history after bad input: %+v, %v", h, err)
		}

		// On with an expiry, then off, then unset: three changes, newest
		// first.
		expires := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "billing.charge.v1", Enabled: true, ExpiresAt: expires, By: "ops@test", Reason: "go live"}); err != nil {
			t.Fatal(err)
		}
		if ts := stored(); len(ts) != 1 || !ts[0].Enabled || !ts[0].ExpiresAt.Equal(expires) {
			t.Fatalf("stored %+v, want on until %v", ts, expires)
		}
		// Switch keys are case-insensitive, as in the toggles file.
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "BILLING.Charge.v1", By: "ops@test", Reason: "incident"}); err != nil {
			t.Fatal(err)
		}
		old, err := c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1", By: "ops@test", Reason: "resolved"})
		if err != nil || old.Enabled || old.Reason != "incident" {
			t.Fatalf("unset returned %+v, %v; want the off switch", old, err)
		}
		h, err := c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "billing.charge.v1"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ch := range h.Changes {
			got = append(got, string(ch.Previous)+">"+string(ch.New)+":"+ch.Reason)
		}
		if want := []string{"off>none:resolved", "on>off:incident", "none>on:go live"}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("history %v, want %v", got, want)
		}
		page, err := c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "billing.charge.v1", Limit: 2})
		if err != nil || len(page.Changes) != 2 || page.Next == 0 {
			t.Fatalf("first page %+v, %v", page, err)
		}
		page, err = c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "billing.charge.v1", Limit: 2, BeforeID: page.Next})
		if err != nil || len(page.Changes) != 1 || page.Next != 0 {
			t.Fatalf("last page %+v, %v", page, err)
		}

		// Force stores a switch for a kind known nowhere (yet).
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "future.kind.v1", Force: true, Reason: "before the deploy"}); err != nil {
			t.Fatal(err)
		}
		// A kind only another node's catalog knows needs no force.
		if err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "other",
			Kinds: []twicetype.KindInfo{{Kind: "remote.kind.v1", Queue: "default"}}}); err != nil {
			t.Fatal(err)
		}
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "remote.kind.v1", Reason: "catalogued"}); err != nil {
			t.Fatal(err)
		}

		// In a transaction.
		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ToggleUnsetTx(ctx, tx.Unwrap(), &twice.ToggleUnsetParams{Kind: "future.kind.v1"}); err != nil {
			t.Fatal(err)
		}
		if err := c.ToggleSetTx(ctx, tx.Unwrap(), &twice.ToggleSetParams{Kind: "report.monthly.v1"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, ts := range stored() {
			kinds = append(kinds, ts.Kind)
		}
		if strings.Join(kinds, ",") != "future.kind.v1,remote.kind.v1" {
			t.Fatalf("after a rolled-back transaction: %v", kinds)
		}
	})
}

func TestAdminSchedules(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))

		list, err := c.ScheduleList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Name != "monthly-report" || !list[0].Registered || list[0].Recorded || list[0].NextAt.IsZero() {
			t.Fatalf("schedules %+v, want the registered monthly-report, never ticked", list)
		}

		// Trigger: one job per request id, with the schedule's args.
		first, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", RequestID: "req-1", By: "ops@test"})
		if err != nil {
			t.Fatal(err)
		}
		if first.Duplicate || first.Job.Kind != "report.monthly.v1" || string(first.Job.Args) != `{"customer_id":1}` || first.Job.Queue != "reports" {
			t.Fatalf("triggered %+v", first.Job)
		}
		again, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", RequestID: "req-1"})
		if err != nil || !again.Duplicate || again.Job.ID != first.Job.ID {
			t.Fatalf("retried trigger: %+v, %v; want the first job as a duplicate", again, err)
		}
		other, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", RequestID: "req-2"})
		if err != nil || other.Duplicate {
			t.Fatalf("second request: %+v, %v; want a new job", other, err)
		}
		_, err = c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "weekly-report"})
		wantErr(t, err, twice.ErrUnknownSchedule, twice.ErrInvalidInput)
		_, err = c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{})
		wantErr(t, err, twice.ErrInvalidInput)

		// In a transaction: the job commits with it, or not at all.
		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		inTx, err := c.ScheduleTriggerTx(ctx, tx.Unwrap(), &twice.ScheduleTriggerParams{Name: "monthly-report", RequestID: "req-tx"})
		if err != nil || inTx.Duplicate {
			t.Fatalf("trigger in tx: %+v, %v", inTx, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = c.JobGet(ctx, inTx.Job.ID)
		wantErr(t, err, twice.ErrJobNotFound)

		// A schedule gone from the code, recorded in the store with its
		// last job: a client without it triggers it from that job's args,
		// and removes it.
		now := time.Now()
		tick, err := store.ScheduleTick(ctx, &twicestore.ScheduleTickParams{
			Name: "old-export", Kind: "report.monthly.v1", Spec: "@daily", TickAt: now.Truncate(time.Hour), NextAt: now.Add(time.Hour),
			Outcome: twicetype.ScheduleEnqueued, Now: now,
			Job: &twicestore.JobInsertParams{Kind: "report.monthly.v1", Queue: "reports", Args: []byte(`{"customer_id":9}`),
				MessageID: "m-old", Key: "m-old", CorrelationID: "c-old", MaxAttempts: 5, RunAt: now, CreatedAt: now},
		})
		if err != nil || !tick.Fired {
			t.Fatalf("tick: %+v, %v", tick, err)
		}
		bare := adminClient(t, store, nil)
		res, err := bare.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "old-export", RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Job.Args) != `{"customer_id":9}` || res.Job.Queue != "reports" || res.Job.MaxAttempts != 5 || res.Job.MessageID == "m-old" {
			t.Fatalf("triggered from the last job: %+v", res.Job)
		}
		list, err = bare.ScheduleList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Name != "old-export" || !list[0].Recorded || list[0].Registered {
			t.Fatalf("bare client's schedules %+v", list)
		}

		err = c.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "monthly-report"})
		wantErr(t, err, twice.ErrInvalidInput)
		err = c.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "no-such"})
		wantErr(t, err, twice.ErrUnknownSchedule)
		tx, err = store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := bare.ScheduleRemoveTx(ctx, tx.Unwrap(), &twice.ScheduleRemoveParams{Name: "old-export"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := bare.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "old-export", By: "ops@test"}); err != nil {
			t.Fatal(err)
		}
		if list, err = bare.ScheduleList(ctx); err != nil || len(list) != 0 {
			t.Fatalf("after remove: %+v, %v", list, err)
		}
		err = bare.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "old-export"})
		wantErr(t, err, twice.ErrUnknownSchedule)
	})
}

// TestAdminStrandedQueues: a queue with waiting jobs that no live node
// serves is reported; once a node lists it, it is not.
func TestAdminStrandedQueues(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil) // reports: no node yet
		stranded, err := c.StrandedQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(stranded) != 1 || stranded[0].Queue != "reports" || stranded[0].Count != 1 {
			t.Fatalf("stranded %+v, want reports with 1 job", stranded)
		}
		now := time.Now()
		err = store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{
			ID: "n1", Kinds: []string{"report.monthly.v1"}, Queues: []string{"reports"}, StartedAt: now, HeartbeatAt: now}})
		if err != nil {
			t.Fatal(err)
		}
		if stranded, err = c.StrandedQueues(ctx); err != nil || len(stranded) != 0 {
			t.Fatalf("with a node serving it: %+v, %v", stranded, err)
		}
		qs, err := c.QueueList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == "reports" && (len(q.Nodes) != 1 || q.Nodes[0] != "n1" || q.Due != 1) {
				t.Fatalf("reports queue %+v, want served by n1 with 1 due job", q)
			}
		}
	})
}

// TestAdminJobCancelRunning: JobCancel of a running job cancels its
// handler's context with ErrJobCancelled and the job ends cancelled with
// the operator's note, never retried: at once when this client runs it
// (the lease heartbeat is minutes away here), and from another client (the
// CLI's) by the worker's cancel poll or, on PostgreSQL, by NOTIFY.
func TestAdminJobCancelRunning(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		started := make(chan int64, 2)
		causes := make(chan error, 2)
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[monthlyReportArgs](func(ctx context.Context, job *twice.Job[monthlyReportArgs]) error {
			started <- job.ID
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}), &twice.KindOpts{Strategy: twice.None, Queue: "reports"})
		cfg := testConfig(reg)
		cfg.Queues = []twice.QueueConfig{{Name: "reports"}}
		cfg.LeaseDuration = 3 * time.Second // heartbeat every second, for the other client's cancel
		worker := startClient(t, store, cfg)
		operator := adminClient(t, store, nil)

		for _, tc := range []struct {
			name string
			by   *twice.Client
		}{{"from the worker's own client", worker}, {"from another client", operator}} {
			job := mustEnqueue(t, worker, monthlyReportArgs{CustomerID: 1}, &twice.EnqueueOpts{MaxAttempts: 5})
			if id := waitfor.Recv(t, started, "the handler to start"); id != job.ID {
				t.Fatalf("%s: started job %d, want %d", tc.name, id, job.ID)
			}
			at := time.Now()
			res, err := tc.by.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{job.ID}, By: "ops@test", Reason: "stuck render"})
			if err != nil {
				t.Fatal(err)
			}
			if r := res.Jobs[0]; !r.CancelRequested || r.State != twicetype.JobStateRunning {
				t.Fatalf("%s: result %+v, want a cancel request", tc.name, r)
			}
			if cause := waitfor.Recv(t, causes, "the cancel to reach the handler"); !errors.Is(cause, twice.ErrJobCancelled) {
				t.Errorf("%s: cause %v, want ErrJobCancelled", tc.name, cause)
			}
			t.Logf("%T, %s: the cancel reached the handler after %s", store, tc.name, time.Since(at).Round(time.Millisecond))
			row := waitJob(t, store, job.ID, "cancelled", isState(twicetype.JobStateCancelled))
			if row.Attempt != 1 || row.Note != "cancelled by ops@test: stuck render" {
				t.Errorf("%s: attempt %d, note %q", tc.name, row.Attempt, row.Note)
			}
		}
	})
}

// TestOneUsageClass: every usage error of the API, the enqueue's and the
// workflow's included, matches ErrInvalidInput, so a tool maps input
// errors to a usage error with one check; failures do not.
func TestOneUsageClass(t *testing.T) {
	t.Parallel()
	c, err := twice.NewClient(newStore(t), testConfig(twice.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, badArgs := c.EnqueueJSON(ctx, "not a kind", []byte(`{}`), nil)
	_, unknown := c.EnqueueJSON(ctx, "nobody.knows.v1", []byte(`{}`), nil)
	_, badWorkflow := c.EnqueueWorkflow(ctx, twice.NewWorkflow("empty"))
	for _, tc := range []struct {
		name     string
		err      error
		sentinel error
	}{
		{"args", badArgs, twice.ErrInvalidArgs},
		{"kind", unknown, twice.ErrUnknownKind},
		{"workflow", badWorkflow, twice.ErrInvalidWorkflow},
	} {
		if !errors.Is(tc.err, tc.sentinel) || !errors.Is(tc.err, twice.ErrInvalidInput) {
			t.Errorf("%s: %v; want it to match its sentinel and ErrInvalidInput", tc.name, tc.err)
		}
	}
	if errors.Is(context.Canceled, twice.ErrInvalidInput) {
		t.Error("a failure matches the usage class")
	}
}
