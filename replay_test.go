package twice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
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
// filter asks for them; JobRetry refuses them by id alone, saying how to
// ask for them.
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
		if err != nil || !errors.Is(res.Err(), twice.ErrJobNotRetryable) || !strings.Contains(res.Err().Error(), "select state completed") {
			t.Errorf("retry of a completed job = %+v, %v; want ErrJobNotRetryable saying to select state completed", res, err)
		}
		if _, err := c.JobRetryPreview(ctx, &twice.JobActionParams{}); !errors.Is(err, twice.ErrInvalidInput) {
			t.Errorf("preview with no selection: %v, want ErrInvalidInput", err)
		}
	})
}

// TestJobRetryReplaysCompleted is issue 25's replay proof at small scale:
// completed ClaimAfter jobs whose markers exist, completed ClaimBefore jobs
// whose own claims leave a replay uncertain, and completed unique jobs
// whose keys newer jobs hold. The preview counts them as no-op, uncertain
// and blocked; the real retry of state completed then completes the
// no-ops again without one handler call, runs none of the uncertain ones
// and leaves the blocked ones; forced with a reason, an uncertain one is
// retried, recorded in its history with who, and the runtime's own guard
// still calls no handler.
func TestJobRetryReplaysCompleted(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		const noops, uncertainN, blockedN = 12, 4, 3
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
		c := startClient(t, store, testConfig(reg))
		var absorbed, uncertain, blocked, all []int64
		for i := range noops {
			absorbed = append(absorbed, mustEnqueue(t, c, replayEmailArgs{N: i}, nil).ID)
		}
		for i := range uncertainN {
			uncertain = append(uncertain, mustEnqueue(t, c, replayChargeArgs{N: i}, nil).ID)
		}
		for i := range blockedN {
			blocked = append(blocked, mustEnqueue(t, c, replayEmailArgs{N: 100 + i}, &twice.EnqueueOpts{UniqueKey: fmt.Sprint("u-", i)}).ID)
		}
		all = append(append(append(all, absorbed...), uncertain...), blocked...)
		for _, id := range all {
			waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
		}
		// Completed outside their unique states (the default), the blocked
		// jobs' keys are free: newer jobs, scheduled later, take them.
		var holders []int64
		for i := range blockedN {
			holders = append(holders, mustEnqueue(t, c, replayEmailArgs{N: 200 + i},
				&twice.EnqueueOpts{UniqueKey: fmt.Sprint("u-", i), RunAt: time.Now().Add(time.Hour)}).ID)
		}
		emailsBefore, chargesBefore := emails.Load(), charges.Load()

		completed := &twice.JobFilter{State: twicetype.JobStateCompleted}
		pv, err := c.JobRetryPreview(ctx, &twice.JobActionParams{Filter: completed})
		if err != nil {
			t.Fatal(err)
		}
		want := map[twice.ReplayClass]int{twice.ReplayNoop: noops, twice.ReplayUncertain: uncertainN, twice.ReplayBlocked: blockedN}
		for _, cl := range twice.ReplayClasses {
			if pv.Counts[cl] != want[cl] {
				t.Fatalf("preview counts %v, want %v", pv.Counts, want)
			}
		}
		if pv.Total != len(all) || pv.Completed != len(all) {
			t.Errorf("preview total %d completed %d, want %d", pv.Total, pv.Completed, len(all))
		}

		res, err := c.JobRetry(ctx, &twice.JobActionParams{Filter: completed, By: "ops@test", Reason: "incident 25"})
		if err != nil {
			t.Fatal(err)
		}
		class := map[int64]twice.ReplayClass{}
		for _, id := range absorbed {
			class[id] = twice.ReplayNoop
		}
		for _, id := range uncertain {
			class[id] = twice.ReplayUncertain
		}
		for _, id := range blocked {
			class[id] = twice.ReplayBlocked
		}
		if len(res.Jobs) != len(all) {
			t.Fatalf("%d results, want %d: %+v", len(res.Jobs), len(all), res.Jobs)
		}
		for _, r := range res.Jobs {
			switch class[r.ID] {
			case twice.ReplayNoop:
				if !r.Changed {
					t.Errorf("no-op job %d: %+v, want retried", r.ID, r)
				}
			case twice.ReplayUncertain:
				if r.Changed || !errors.Is(r.Err, twice.ErrRetryUncertain) {
					t.Errorf("uncertain job %d: %+v, want skipped with ErrRetryUncertain", r.ID, r)
				}
			case twice.ReplayBlocked:
				if r.Changed || !errors.Is(r.Err, twice.ErrUniqueConflict) {
					t.Errorf("blocked job %d: %+v, want ErrUniqueConflict", r.ID, r)
				}
			default:
				t.Errorf("result for job %d, which the replay did not select: %+v", r.ID, r)
			}
		}
		for _, id := range absorbed {
			row := waitJob(t, store, id, "completed again as a no-op", func(j *twicetype.JobRow) bool {
				return j.State == twicetype.JobStateCompleted && j.Note != ""
			})
			if row.Attempt != 1 {
				t.Errorf("replayed job %d: attempt %d, want 1", id, row.Attempt)
			}
		}
		if n := emails.Load() - emailsBefore; n != 0 {
			t.Errorf("%d email effect calls during the replay, want 0 for the %d no-ops", n, noops)
		}
		for _, id := range append(append([]int64{}, uncertain...), blocked...) {
			if row := mustGet(t, c, id); row.State != twicetype.JobStateCompleted || row.Note != "" {
				t.Errorf("job %d after the replay: %s, note %q; want completed as it was", id, row.State, row.Note)
			}
		}
		for _, id := range holders {
			if st := mustGet(t, c, id).State; st != twicetype.JobStateAvailable {
				t.Errorf("holder %d is %s, want available", id, st)
			}
		}

		// Forced, with a reason: the uncertain job is retried and the
		// operator recorded on it; its own claim makes the runtime
		// dead-letter it rather than charge again.
		res, err = c.JobRetry(ctx, &twice.JobActionParams{IDs: uncertain[:1], Filter: completed, By: "ops@test",
			Reason: "checked the provider", Force: true})
		if err != nil || len(res.Changed()) != 1 {
			t.Fatalf("forced replay = %+v, %v; want the job retried", res, err)
		}
		row := waitJob(t, store, uncertain[0], "dead (its own claim)", isState(twicetype.JobStateDead))
		if n := charges.Load() - chargesBefore; n != 0 {
			t.Errorf("%d charges after the forced replay, want 0", n)
		}
		recorded := false
		for _, e := range row.Errors {
			recorded = recorded || e.Error == "retried by ops@test despite an uncertain effect (forced): checked the provider"
		}
		if !recorded {
			t.Errorf("the forced replay is not in the job's history: %+v", row.Errors)
		}
	})
}

type replayStepArgs struct {
	Step string `json:"step"`
}

func (replayStepArgs) Kind() string { return "replay.step.v1" }

// TestJobRetryCompletedComposed: a replay of completed jobs leaves the
// workflow tasks and batch members among them (their completion released
// their dependents or counted in their batch), as the preview says, and
// a continuation's parent replayed as a no-op inserts no second child.
func TestJobRetryCompletedComposed(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		var calls atomic.Int64
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[replayStepArgs](func(_ context.Context, j *twice.Job[replayStepArgs]) error {
			calls.Add(1)
			if j.Args.Step == "parent" {
				return j.Then(replayStepArgs{Step: "child"}, nil)
			}
			return nil
		}), nil)
		c := startClient(t, store, testConfig(reg))
		wf, err := c.EnqueueWorkflow(ctx, twice.NewWorkflow("replay").
			Add("a", replayStepArgs{Step: "a"}, nil).
			Add("b", replayStepArgs{Step: "b"}, nil, "a"))
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.EnqueueBatch(ctx, twice.NewBatch(replayStepArgs{Step: "callback"}, nil).
			Add(replayStepArgs{Step: "m1"}, nil).Add(replayStepArgs{Step: "m2"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		parent := mustEnqueue(t, c, replayStepArgs{Step: "parent"}, nil)
		waitfor.Cond(t, "the workflow, the batch's callback and the child to complete", func() bool {
			n, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{State: twicetype.JobStateCompleted}})
			return err == nil && len(n.Jobs) == 7 // a, b, m1, m2, the callback, the parent, the child
		}, nil)
		info, err := c.WorkflowGet(ctx, wf.Workflow.ID)
		if err != nil {
			t.Fatal(err)
		}
		refused := map[int64]string{
			info.Task("a").Job.ID: fmt.Sprintf(`task "a" of workflow %d`, wf.Workflow.ID),
			info.Task("b").Job.ID: fmt.Sprintf(`task "b" of workflow %d`, wf.Workflow.ID),
			batch.Jobs[0].Job.ID:  fmt.Sprintf("member of batch %d", batch.Batch.ID),
			batch.Jobs[1].Job.ID:  fmt.Sprintf("member of batch %d", batch.Batch.ID),
		}
		batchBefore, err := c.BatchGet(ctx, batch.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		callsBefore := calls.Load()

		completed := &twice.JobFilter{State: twicetype.JobStateCompleted}
		pv, err := c.JobRetryPreview(ctx, &twice.JobActionParams{Filter: completed})
		if err != nil {
			t.Fatal(err)
		}
		// The callback, the parent and the child completed under
		// ClaimAfter: their markers exist.
		if pv.Counts[twice.ReplayRefused] != 4 || pv.Counts[twice.ReplayNoop] != 3 || pv.Total != 7 {
			t.Errorf("preview = %+v, want 4 refused and 3 no-op", pv)
		}
		res, err := c.JobRetry(ctx, &twice.JobActionParams{Filter: completed, By: "ops@test"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Jobs {
			if why, ok := refused[r.ID]; ok {
				if r.Changed || !errors.Is(r.Err, twice.ErrJobNotRetryable) || !strings.Contains(r.Err.Error(), why) {
					t.Errorf("job %d: %+v, want refused naming %s", r.ID, r, why)
				}
			} else if !r.Changed {
				t.Errorf("job %d: %+v, want replayed", r.ID, r)
			}
		}
		if len(res.Changed()) != 3 {
			t.Errorf("replayed %v, want the callback, the parent and the child", res.Changed())
		}
		for _, id := range res.Changed() {
			waitJob(t, store, id, "completed again as a no-op", func(j *twicetype.JobRow) bool {
				return j.State == twicetype.JobStateCompleted && j.Note != ""
			})
		}
		if n := calls.Load() - callsBefore; n != 0 {
			t.Errorf("%d handler calls during the replay, want 0", n)
		}
		kids, err := store.JobChildren(ctx, &twicestore.JobChildrenParams{ParentID: parent.ID})
		if err != nil || len(kids) != 1 {
			t.Errorf("children of the replayed parent = %d (%v), want the one of its first completion", len(kids), err)
		}
		after, err := c.WorkflowGet(ctx, wf.Workflow.ID)
		if err != nil || after.Workflow.Completed != 2 || after.Workflow.State != twicetype.WorkflowCompleted {
			t.Errorf("workflow after the replay = %+v, %v; want 2 completed, completed", after.Workflow, err)
		}
		batchAfter, err := c.BatchGet(ctx, batch.Batch.ID)
		if err != nil || batchAfter.Completed != batchBefore.Completed || batchAfter.Pending != 0 || batchAfter.CallbackJobID != batchBefore.CallbackJobID {
			t.Errorf("batch after the replay = %+v, %v; want as before: %+v", batchAfter, err, batchBefore)
		}
	})
}
