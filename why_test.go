package twice_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/whytest"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestJobWaitReasons (issue 25): over a team's database with a job waiting
// for each reason, JobWaitReasons gives each its reason with who, why and
// until when, and none to the running jobs; JobWaitCounts counts the due
// ones by reason.
func TestJobWaitReasons(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		db := whytest.Start(t, store)
		// An admin client, as a dashboard-only binary runs one: not started,
		// with the team's registry.
		client, err := twice.NewClient(store, twice.Config{Registry: db.Registry, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		page, err := client.JobList(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		reasons, err := client.JobWaitReasons(t.Context(), page.Jobs)
		if err != nil {
			t.Fatal(err)
		}
		if len(reasons) != len(page.Jobs) {
			t.Fatalf("%d reasons for %d jobs", len(reasons), len(page.Jobs))
		}
		byID := map[int64]*twice.WaitReason{}
		for i, j := range page.Jobs {
			byID[j.ID] = reasons[i]
			if j.State == twicetype.JobStateRunning && reasons[i] != nil {
				t.Errorf("running job %d has a reason: %+v", j.ID, reasons[i])
			}
		}
		for _, j := range db.Jobs {
			r := byID[j.ID]
			if r == nil || r.Code != j.Code {
				t.Errorf("%s job %d: reason %+v, want code %s", j.Name, j.ID, r, j.Code)
				continue
			}
			if !strings.HasPrefix(r.Text, string(j.Code)+":") {
				t.Errorf("%s job: text %q does not start with its code", j.Name, r.Text)
			}
		}
		check := func(name string, ok func(r *twice.WaitReason) bool) {
			t.Helper()
			if r := byID[db.Job(t, name).ID]; r != nil && !ok(r) {
				t.Errorf("%s job: reason %+v", name, r)
			}
		}
		check("held", func(r *twice.WaitReason) bool {
			return r.Source == twice.WaitSourceStore && r.By == whytest.SwitchBy && r.Reason == whytest.SwitchReason &&
				!r.Since.IsZero() && strings.Contains(r.Text, whytest.SwitchBy) && strings.Contains(r.Text, whytest.SwitchReason)
		})
		check("fail-closed", func(r *twice.WaitReason) bool {
			return r.Source == twice.WaitSourceFailClosed && strings.Contains(r.Text, "fail-closed")
		})
		check("throttled", func(r *twice.WaitReason) bool {
			return r.Limit != nil && slices.Equal(r.Limit.Limits, []string{"global 1"}) &&
				r.Limit.Running == 1 && r.Limit.Due == 1 && r.Limit.Throttled == 1 &&
				strings.Contains(r.Text, "global 1") && strings.Contains(r.Text, "1 running")
		})
		check("paused", func(r *twice.WaitReason) bool {
			return r.By == whytest.PauseBy && r.Reason == whytest.PauseReason && !r.Since.IsZero() && r.Until.IsZero() &&
				strings.Contains(r.Text, "its queue is paused by "+whytest.PauseBy)
		})
		check("scheduled", func(r *twice.WaitReason) bool {
			return r.Retry == 0 && r.Until.After(time.Now().Add(23*time.Hour)) && strings.HasPrefix(r.Text, "scheduled: due at ")
		})
		check("retrying", func(r *twice.WaitReason) bool {
			return r.Retry == 1 && r.Retries == whytest.FlakyAttempts-1 && r.Until.After(time.Now()) &&
				strings.HasPrefix(r.Text, "scheduled: retry 1 of 2 at ")
		})
		check("parked", func(r *twice.WaitReason) bool {
			return r.Signal == whytest.ApprovalSignal && r.Until.IsZero() && strings.Contains(r.Text, `"approval" (no timeout)`)
		})
		check("orphaned", func(r *twice.WaitReason) bool { return strings.Contains(r.Text, "no live worker registers its kind") })

		counts, err := client.JobWaitCounts(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := []twice.WaitCount{
			{Kind: whytest.KindFailClosed, Queue: twice.QueueDefault, Code: twice.WaitHeld, Count: 1},
			{Kind: whytest.KindGone, Queue: twice.QueueDefault, Code: twice.WaitOrphaned, Count: 1},
			{Kind: whytest.KindHeld, Queue: twice.QueueDefault, Code: twice.WaitHeld, Count: 1},
			{Kind: whytest.KindLimited, Queue: twice.QueueDefault, Code: twice.WaitThrottled, Count: 1},
			{Kind: whytest.KindReport, Queue: whytest.PausedQueue, Code: twice.WaitPaused, Count: 1},
			{Kind: whytest.KindSlow, Queue: whytest.SlowQueue, Code: twice.WaitDue, Count: 1},
		}
		if !slices.Equal(counts, want) {
			t.Errorf("JobWaitCounts = %+v\nwant %+v", counts, want)
		}
	})
}

// TestJobWaitReasonsReadsNothingForRunningJobs: a page with no job that
// waits costs no store read.
func TestJobWaitReasonsReadsNothingForRunningJobs(t *testing.T) {
	t.Parallel()
	client, err := twice.NewClient(&failingStore{Store: newStore(t)}, twice.Config{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	jobs := []*twicetype.JobRow{{ID: 1, State: twicetype.JobStateRunning}, {ID: 2, State: twicetype.JobStateCompleted}}
	reasons, err := client.JobWaitReasons(t.Context(), jobs)
	if err != nil || len(reasons) != 2 || reasons[0] != nil || reasons[1] != nil {
		t.Errorf("JobWaitReasons = %v, %v; want two nil reasons", reasons, err)
	}
	if _, err := client.JobWaitReasons(t.Context(), []*twicetype.JobRow{{ID: 3, State: twicetype.JobStateAvailable}}); err == nil {
		t.Error("a waiting job's reason read nothing from the store")
	}
}

// failingStore fails every read JobWaitReasons makes first.
type failingStore struct{ twicestore.Store }

func (*failingStore) ToggleList(context.Context, *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	return nil, context.DeadlineExceeded
}

type etlArgs struct{}

func (etlArgs) Kind() string { return "test.etl.v1" }

// TestTaskWaitReason: a workflow task that has no job yet says which of
// its dependencies it waits for: those not completed; one with a job, as
// its job waits.
func TestTaskWaitReason(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[etlArgs](func(context.Context, *twice.Job[etlArgs]) error { return nil }), nil)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w := twice.NewWorkflow("etl").
		Add("extract", etlArgs{}, nil).
		Add("clean", etlArgs{}, nil).
		Add("load", etlArgs{}, nil, "extract", "clean").
		Add("report", etlArgs{}, nil, "load")
	res, err := client.EnqueueWorkflow(t.Context(), w)
	if err != nil {
		t.Fatal(err)
	}
	info, err := client.WorkflowGet(t.Context(), res.Workflow.ID)
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := client.WorkflowWaitReasons(t.Context(), info)
	if err != nil {
		t.Fatal(err)
	}
	for task, code := range map[string]twice.WaitCode{"extract": twice.WaitOrphaned, "clean": twice.WaitOrphaned,
		"load": twice.WaitDependencies, "report": twice.WaitDependencies} {
		if r := reasons[task]; r == nil || r.Code != code {
			t.Errorf("WorkflowWaitReasons[%s] = %+v, want code %s (no worker runs the kind)", task, r, code)
		}
	}
	for task, want := range map[string][]string{"extract": nil, "clean": nil, "load": {"clean", "extract"}, "report": {"load"}, "nope": nil} {
		r := info.TaskWaitReason(task)
		switch {
		case want == nil && r != nil:
			t.Errorf("task %s: reason %+v, want none", task, r)
		case want != nil && (r == nil || r.Code != twice.WaitDependencies || !slices.Equal(r.Dependencies, want) ||
			r.Text != "dependencies: waiting for "+strings.Join(want, ", ")+" to complete"):
			t.Errorf("task %s: reason %+v, want dependencies %v", task, r, want)
		}
	}
}
