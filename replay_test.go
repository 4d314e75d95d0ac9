package twice_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type replayEmailArgs struct {
	N int `json:"n"`
}

func (replayEmailArgs) Kind() string { return "replay.email.v1" }

type replayChargeArgs struct {
	N int `json:"n"`
}

func (replayChargeArgs) Kind() string { return "replay.charge.v1" }

// TestJobRetryPreview: a preview classifies dead jobs as no-op (marker
// claimed), will run, uncertain (their own ClaimBefore claim) and blocked
// (a unique key held), changing nothing; the real retry then calls no
// handler for the no-ops, runs the will-run ones, skips the uncertain ones
// unless forced with a reason, and leaves the blocked one.
func TestJobRetryPreview(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		var emails, charges atomic.Int64
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[replayEmailArgs](func(context.Context, *twice.Job[replayEmailArgs]) error {
			emails.Add(1)
			return nil
		}), &twice.KindOpts{HandlerName: "mailer"})
		twice.MustRegister(reg, twice.HandlerFunc[replayChargeArgs](func(context.Context, *twice.Job[replayChargeArgs]) error {
			charges.Add(1)
			return nil
		}), &twice.KindOpts{Strategy: twice.ClaimBefore})
		admin, err := twice.NewClient(store, testConfig(reg))
		if err != nil {
			t.Fatal(err)
		}
		// kill leases the job and dead-letters it, after during.
		kill := func(j *twicetype.JobRow, during func(*twicetype.JobRow)) {
			t.Helper()
			leased := leaseOne(t, store, twice.QueueDefault, j.Kind)
			if during != nil {
				during(leased)
			}
			if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
				ID: leased.ID, Epoch: leased.Epoch, State: twicetype.JobStateDead, FinishedAt: time.Now(),
			}}}); err != nil {
				t.Fatal(err)
			}
		}
		claim := func(handler string, jobID, epoch int64) func(*twicetype.JobRow) {
			return func(j *twicetype.JobRow) {
				if _, err := store.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: handler, Key: j.Key, Now: time.Now(),
					JobID: jobID, Epoch: epoch}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var noops, runs []int64
		for i := range 3 { // the effect happened (a duplicate delivered it), then this job died
			j := mustEnqueue(t, admin, replayEmailArgs{N: i}, nil)
			kill(j, claim("mailer", 0, 0))
			noops = append(noops, j.ID)
		}
		for i := range 2 {
			j := mustEnqueue(t, admin, replayEmailArgs{N: 10 + i}, nil)
			kill(j, nil)
			runs = append(runs, j.ID)
		}
		uncertain := mustEnqueue(t, admin, replayChargeArgs{N: 1}, nil)
		kill(uncertain, func(j *twicetype.JobRow) { claim("replay.charge.v1", j.ID, j.Epoch)(j) })
		blocked := mustEnqueue(t, admin, replayEmailArgs{N: 20}, &twice.EnqueueOpts{UniqueKey: "u-1"})
		kill(blocked, nil)
		holder := mustEnqueue(t, admin, replayEmailArgs{N: 21}, &twice.EnqueueOpts{UniqueKey: "u-1", RunAt: time.Now().Add(time.Hour)})

		dead := &twice.JobFilter{State: twicetype.JobStateDead}
		pv, err := admin.JobRetryPreview(ctx, &twice.JobActionParams{Filter: dead})
		if err != nil {
			t.Fatal(err)
		}
		want := map[twice.ReplayClass]int{twice.ReplayNoop: 3, twice.ReplayWillRun: 2, twice.ReplayUncertain: 1, twice.ReplayBlocked: 1}
		for _, cl := range twice.ReplayClasses {
			if pv.Counts[cl] != want[cl] {
				t.Errorf("preview counts %v, want %v", pv.Counts, want)
				break
			}
		}
		if pv.Total != 7 || len(pv.Samples[twice.ReplayNoop]) != 3 || pv.Samples[twice.ReplayUncertain][0] != uncertain.ID ||
			pv.Samples[twice.ReplayBlocked][0] != blocked.ID {
			t.Errorf("preview = %+v", pv)
		}
		if st := mustGet(t, admin, runs[0]).State; st != twicetype.JobStateDead {
			t.Fatalf("after a preview job %d is %s, want still dead", runs[0], st)
		}
		if _, err := admin.JobRetry(ctx, &twice.JobActionParams{Filter: dead, Force: true}); !errors.Is(err, twice.ErrInvalidInput) {
			t.Fatalf("retry with Force and no reason: %v, want ErrInvalidInput", err)
		}
		if st := mustGet(t, admin, runs[0]).State; st != twicetype.JobStateDead {
			t.Fatalf("after a refused retry job %d is %s, want still dead", runs[0], st)
		}

		c := startClient(t, store, testConfig(reg))
		res, err := c.JobRetry(ctx, &twice.JobActionParams{Filter: dead, By: "ops@test"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Jobs {
			switch r.ID {
			case uncertain.ID:
				if r.Changed || !errors.Is(r.Err, twice.ErrRetryUncertain) {
					t.Errorf("uncertain job: %+v, want skipped with ErrRetryUncertain", r)
				}
			case blocked.ID:
				if r.Changed || !errors.Is(r.Err, twice.ErrUniqueConflict) {
					t.Errorf("blocked job: %+v, want ErrUniqueConflict", r)
				}
			default:
				if !r.Changed {
					t.Errorf("job %d: %+v, want retried", r.ID, r)
				}
			}
		}
		if len(res.Jobs) != 7 {
			t.Errorf("%d results, want 7: %+v", len(res.Jobs), res.Jobs)
		}
		for _, id := range append(append([]int64{}, noops...), runs...) {
			waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
		}
		if n := emails.Load(); n != int64(len(runs)) {
			t.Errorf("%d email handler calls, want %d: none for the %d no-ops", n, len(runs), len(noops))
		}
		for _, id := range noops {
			if note := mustGet(t, c, id).Note; note == "" {
				t.Errorf("no-op job %d completed without a note saying it was already processed", id)
			}
		}
		if st := mustGet(t, c, uncertain.ID).State; st != twicetype.JobStateDead || charges.Load() != 0 {
			t.Errorf("uncertain job is %s after %d charges, want dead and none", st, charges.Load())
		}
		if st := mustGet(t, c, holder.ID).State; st != twicetype.JobStateAvailable {
			t.Errorf("holder is %s, want available", st)
		}

		// Forced, with a reason: the uncertain job is retried, and the
		// runtime's own guard still refuses to repeat its effect.
		res, err = c.JobRetry(ctx, &twice.JobActionParams{IDs: []int64{uncertain.ID}, By: "ops@test", Reason: "checked the provider: no charge", Force: true})
		if err != nil || len(res.Changed()) != 1 {
			t.Fatalf("forced retry = %+v, %v; want the job retried", res, err)
		}
		row := waitJob(t, store, uncertain.ID, "dead again", func(j *twicetype.JobRow) bool { return j.State == twicetype.JobStateDead })
		if charges.Load() != 0 {
			t.Errorf("%d charges after the forced retry, want 0 (state %s)", charges.Load(), row.State)
		}
		recorded := false
		for _, e := range row.Errors {
			recorded = recorded || e.Error == "retried by ops@test despite an uncertain effect (forced): checked the provider: no charge"
		}
		if !recorded {
			t.Errorf("the forced retry is not in the job's history: %+v", row.Errors)
		}
	})
}

// TestJobRetryPreviewCompleted: completed jobs are classified when the
// filter asks for them; JobRetry still refuses them.
func TestJobRetryPreviewCompleted(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		var calls atomic.Int64
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[replayEmailArgs](func(context.Context, *twice.Job[replayEmailArgs]) error {
			calls.Add(1)
			return nil
		}), nil)
		c := startClient(t, store, testConfig(reg))
		var ids []int64
		for i := range 4 {
			ids = append(ids, mustEnqueue(t, c, replayEmailArgs{N: i}, nil).ID)
		}
		for _, id := range ids {
			waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
		}
		pv, err := c.JobRetryPreview(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{State: twicetype.JobStateCompleted}})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Total != 4 || pv.Completed != 4 || pv.Counts[twice.ReplayNoop] != 4 {
			t.Errorf("preview of completed jobs = %+v, want 4 no-ops", pv)
		}
		res, err := c.JobRetry(ctx, &twice.JobActionParams{IDs: ids[:1]})
		if err != nil || !errors.Is(res.Err(), twice.ErrJobNotRetryable) {
			t.Errorf("retry of a completed job = %+v, %v; want ErrJobNotRetryable", res, err)
		}
		if _, err := c.JobRetryPreview(ctx, &twice.JobActionParams{}); !errors.Is(err, twice.ErrInvalidInput) {
			t.Errorf("preview with no selection: %v, want ErrInvalidInput", err)
		}
	})
}
