package twice_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// packArgs is a stepped job of the JobDetail test: it packs (ClaimAfter),
// then charges (ClaimBefore), which blocks until the test says how it
// ends.
type packArgs struct{ Order int }

func (packArgs) Kind() string { return "detail.pack.v1" }

// stepStatuses lists a detail's steps as name → status.
func stepStatuses(d *twice.JobDetail) map[string]twice.StepStatus {
	out := map[string]twice.StepStatus{}
	for _, s := range d.Steps {
		out[s.Step.Step] = s.Status
	}
	return out
}

// TestJobDetailStepStatus: a step with a receipt is done; one claimed by
// the delivery running now is running; the same claim once the job died
// is uncertain, on both drivers.
func TestJobDetailStepStatus(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		inCharge, release := make(chan struct{}), make(chan error)
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[packArgs](func(ctx context.Context, _ *twice.Job[packArgs]) error {
			if _, err := twice.Step(ctx, "pack", twice.ClaimAfter, func(context.Context) (string, error) { return "box-1", nil }); err != nil {
				return err
			}
			_, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (string, error) {
				close(inCharge)
				return "", <-release
			})
			return err
		}), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 1, HandlerName: "shop.pack"})
		c := startClient(t, store, testConfig(reg))
		job := mustEnqueue(t, c, packArgs{Order: 1}, nil)

		<-inCharge
		d, err := c.JobDetail(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]twice.StepStatus{"pack": twice.StepDone, "charge": twice.StepRunning}
		if got := stepStatuses(d); !maps.Equal(got, want) || d.Handler != "shop.pack" {
			t.Errorf("while charging: steps %v under %q, want %v under shop.pack", got, d.Handler, want)
		}
		if string(d.Steps[1].Receipt) != `"box-1"` {
			t.Errorf("pack's receipt = %s", d.Steps[1].Receipt)
		}
		release <- errors.New("provider timed out")
		waitJob(t, store, job.ID, "dead", isState(twicetype.JobStateDead))
		if d, err = c.JobDetail(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		want["charge"] = twice.StepUncertain
		if got := stepStatuses(d); !maps.Equal(got, want) {
			t.Errorf("once dead: steps %v, want %v", got, want)
		}
		if d.Output != nil || d.Batch != nil || d.Workflow != nil || d.ParentID != 0 || len(d.Children) != 0 {
			t.Errorf("a plain dead job's detail = %+v, want no output and no composition", d)
		}
		if _, err := c.JobDetail(ctx, 1<<40); !errors.Is(err, twice.ErrJobNotFound) {
			t.Errorf("JobDetail of a missing job: %v, want ErrJobNotFound", err)
		}
	})
}

// TestJobDetailWorkflow: a workflow task's job names its workflow, its
// task and its dependencies' jobs; a continuation names its parent, and
// the parent lists it.
func TestJobDetailWorkflow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[monthlyReportArgs](func(_ context.Context, job *twice.Job[monthlyReportArgs]) error {
			if job.Args.CustomerID == 1 {
				return job.Then(chargeArgs{ChargeID: 9}, nil)
			}
			return nil
		}), nil)
		twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(context.Context, *twice.Job[chargeArgs]) error { return nil }), nil)
		c := startClient(t, store, testConfig(reg))
		wf, err := c.EnqueueWorkflow(ctx, twice.NewWorkflow("close month").
			Add("first", monthlyReportArgs{CustomerID: 1}, nil).
			Add("second", monthlyReportArgs{CustomerID: 2}, nil, "first"))
		if err != nil {
			t.Fatal(err)
		}
		first := wf.Jobs[0].ID
		var second int64
		waitfor.Cond(t, "the second task's job", func() bool {
			info, err := c.WorkflowGet(ctx, wf.Workflow.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j := info.Task("second").Job; j != nil {
				second = j.ID
			}
			return second != 0
		}, func() string { return "no job yet" })
		d, err := c.JobDetail(ctx, second)
		if err != nil {
			t.Fatal(err)
		}
		if w := d.Workflow; w == nil || w.ID != wf.Workflow.ID || w.Task != "second" || !maps.Equal(w.Deps, map[string]int64{"first": first}) {
			t.Errorf("second task's workflow = %+v, want workflow %d, task second, deps first=%d", w, wf.Workflow.ID, first)
		}
		d, err = c.JobDetail(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Children) != 1 || d.Children[0].Kind != "billing.charge.v1" || d.ChildrenMore {
			t.Fatalf("first task's children = %v, want its continuation", d.Children)
		}
		child, err := c.JobDetail(ctx, d.Children[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if child.ParentID != first || child.Workflow != nil {
			t.Errorf("continuation's parent %d, workflow %+v; want parent %d, no workflow", child.ParentID, child.Workflow, first)
		}
	})
}
