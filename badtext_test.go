package twice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// badTexts are the three ways a free-text field is refused: a NUL byte,
// bytes that are not UTF-8, and one byte over the field's cap.
func badTexts(limit int) []struct{ name, value string } {
	return []struct{ name, value string }{
		{"NUL", "ops\x00@acme"},
		{"invalid UTF-8", "caf\xe9"},
		{"over the cap", strings.Repeat("a", limit+1)},
	}
}

// adminWorld is what the bad-text calls would change, were they not
// refused: a waiting job, a dead one, a marker, a recorded schedule, a
// stored switch and a running workflow.
type adminWorld struct {
	waiting, dead *twicetype.JobRow
	workflow      int64
}

func newAdminWorld(t *testing.T, store twicestore.Store, c *twice.Client) adminWorld {
	t.Helper()
	ctx := context.Background()
	var w adminWorld
	w.waiting = mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, &twice.EnqueueOpts{Delay: time.Hour})
	charge := mustEnqueue(t, c, chargeArgs{ChargeID: 2}, nil)
	w.dead = leaseOne(t, store, twice.QueueDefault, charge.Kind)
	if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: w.dead.ID, Epoch: w.dead.Epoch, State: twicetype.JobStateDead,
	}}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := store.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "billing.charge.v1", Key: "order-7", Now: now, JobID: w.dead.ID, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ScheduleTick(ctx, &twicestore.ScheduleTickParams{
		Name: "old-export", Kind: "report.monthly.v1", Spec: "@daily", TickAt: now.Truncate(time.Hour), NextAt: now.Add(time.Hour),
		Outcome: twicetype.ScheduleSkipped, Now: now,
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "billing.charge.v1", Enabled: true, By: "ops@test", Reason: "setup"}); err != nil {
		t.Fatal(err)
	}
	wf, err := c.EnqueueWorkflow(ctx, twice.NewWorkflow("nightly").
		Add("first", monthlyReportArgs{CustomerID: 3}, &twice.EnqueueOpts{Delay: time.Hour}).
		Add("second", monthlyReportArgs{CustomerID: 4}, nil, "first"))
	if err != nil {
		t.Fatal(err)
	}
	w.workflow = wf.Workflow.ID
	return w
}

// adminSnapshot prints what an admin write can change: jobs and their
// states, queues and their pauses, switches and their history, recorded
// schedules, the marker, workflows and their states.
func adminSnapshot(t *testing.T, c *twice.Client) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	jobs, err := c.JobList(ctx, &twice.JobListParams{Limit: twice.JobListLimitMax})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Jobs {
		fmt.Fprintf(&b, "job %d %s\n", j.ID, j.State)
	}
	queues, err := c.QueueList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		fmt.Fprintf(&b, "queue %s paused=%v by=%q reason=%q\n", q.Name, q.Paused, q.By, q.Reason)
	}
	toggles, err := c.ToggleList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range toggles {
		fmt.Fprintf(&b, "switch %s %v by=%q reason=%q\n", tg.Kind, tg.Enabled, tg.By, tg.Reason)
	}
	history, err := c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Limit: twice.JobListLimitMax})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "switch changes %d\n", len(history.Changes))
	overrides, err := c.LimitOverrideList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limits, err := c.LimitHistory(ctx, &twice.LimitHistoryParams{Limit: twice.JobListLimitMax})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "limit overrides %d, changes %d\n", len(overrides), len(limits.Changes))
	schedules, err := c.ScheduleList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range schedules {
		fmt.Fprintf(&b, "schedule %s recorded=%v\n", s.Name, s.Recorded)
	}
	_, err = c.MarkerGet(ctx, &twice.MarkerParams{Handler: "billing.charge.v1", Key: "order-7"})
	fmt.Fprintf(&b, "marker held=%v\n", err == nil)
	workflows, err := c.WorkflowList(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workflows {
		fmt.Fprintf(&b, "workflow %d %s\n", w.ID, w.State)
	}
	return b.String()
}

// TestAdminRefusesBadText: every free-text field of every admin call (and
// of its Tx twin) refuses a NUL byte, bytes that are not UTF-8 and text
// over its cap, on both drivers alike: an error wrapping ErrInvalidInput
// that names the field, never the database's own error, and nothing
// stored or changed.
func TestAdminRefusesBadText(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		w := newAdminWorld(t, store, c)
		before := adminSnapshot(t, c)

		// inTx runs call in a transaction it rolls back.
		inTx := func(call func(tx any) error) error {
			tx, err := store.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			return call(tx.Unwrap())
		}
		jobs := func(ids ...int64) []int64 { return ids }
		three := 3
		marker := twice.MarkerParams{Handler: "billing.charge.v1", Key: "order-7"}

		for _, tc := range []struct {
			method string
			field  string // as the error names it
			limit  int
			call   func(s string) error
		}{
			{"JobList", "kind filter", twice.MaxKindBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Kind: s}})
				return err
			}},
			{"JobList", "queue filter", twice.MaxQueueBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Queue: s}})
				return err
			}},
			{"JobList", "node filter", twice.MaxNameBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Node: s}})
				return err
			}},
			{"JobList", "correlation id filter", twice.MaxKeyBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{CorrelationID: s}})
				return err
			}},
			{"JobList", "metadata filter key", twice.MaxKeyBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Metadata: map[string]string{s: "acme"}}})
				return err
			}},
			{"JobList", `metadata filter "tenant"`, twice.MaxKeyBytes, func(s string) error {
				_, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Metadata: map[string]string{"tenant": s}}})
				return err
			}},
			{"JobCancel", "correlation id filter", twice.MaxKeyBytes, func(s string) error {
				_, err := c.JobCancel(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{CorrelationID: s}})
				return err
			}},
			{"JobRetry", `metadata filter "tenant"`, twice.MaxKeyBytes, func(s string) error {
				_, err := c.JobRetry(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{Metadata: map[string]string{"tenant": s}}})
				return err
			}},
			{"JobCancel", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), By: s})
				return err
			}},
			{"JobCancel", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), Reason: s})
				return err
			}},
			{"JobCancel", "queue filter", twice.MaxQueueBytes, func(s string) error {
				_, err := c.JobCancel(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{Queue: s}})
				return err
			}},
			{"JobCancelTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.JobCancelTx(ctx, tx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), Reason: s})
					return err
				})
			}},
			{"JobDelete", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.JobDelete(ctx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), By: s})
				return err
			}},
			{"JobDelete", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.JobDelete(ctx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), Reason: s})
				return err
			}},
			{"JobDelete", "kind filter", twice.MaxKindBytes, func(s string) error {
				_, err := c.JobDelete(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{Kind: s}})
				return err
			}},
			{"JobDeleteTx", "by", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.JobDeleteTx(ctx, tx, &twice.JobActionParams{IDs: jobs(w.waiting.ID), By: s})
					return err
				})
			}},
			{"JobRetry", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.JobRetry(ctx, &twice.JobActionParams{IDs: jobs(w.dead.ID), By: s})
				return err
			}},
			{"JobRetry", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.JobRetry(ctx, &twice.JobActionParams{IDs: jobs(w.dead.ID), Reason: s})
				return err
			}},
			{"JobRetryTx", "node filter", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.JobRetryTx(ctx, tx, &twice.JobActionParams{IDs: jobs(w.dead.ID), Filter: &twice.JobFilter{Node: s}})
					return err
				})
			}},
			{"JobDiscard", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.JobDiscard(ctx, &twice.JobActionParams{IDs: jobs(w.dead.ID), By: s})
				return err
			}},
			{"JobDiscard", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.JobDiscard(ctx, &twice.JobActionParams{IDs: jobs(w.dead.ID), Reason: s})
				return err
			}},
			{"JobDiscardTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.JobDiscardTx(ctx, tx, &twice.JobActionParams{IDs: jobs(w.dead.ID), Reason: s})
					return err
				})
			}},
			{"MarkerGet", "handler", twice.MaxKeyBytes, func(s string) error {
				_, err := c.MarkerGet(ctx, &twice.MarkerParams{Handler: s, Key: "order-7"})
				return err
			}},
			{"MarkerGet", "key", twice.MaxKeyBytes, func(s string) error {
				_, err := c.MarkerGet(ctx, &twice.MarkerParams{Handler: "billing.charge.v1", Key: s})
				return err
			}},
			{"MarkerRelease", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.MarkerRelease(ctx, &twice.MarkerReleaseParams{MarkerParams: marker, By: s})
				return err
			}},
			{"MarkerRelease", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.MarkerRelease(ctx, &twice.MarkerReleaseParams{MarkerParams: marker, Reason: s})
				return err
			}},
			{"MarkerReleaseTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.MarkerReleaseTx(ctx, tx, &twice.MarkerReleaseParams{MarkerParams: marker, Reason: s})
					return err
				})
			}},
			{"QueuePause", "queue name", twice.MaxQueueBytes, func(s string) error {
				return c.QueuePause(ctx, &twice.QueuePauseParams{Queue: s})
			}},
			{"QueuePause", "by", twice.MaxNameBytes, func(s string) error {
				return c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reports", By: s})
			}},
			{"QueuePause", "reason", twice.MaxReasonBytes, func(s string) error {
				return c.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reports", Reason: s})
			}},
			{"QueuePauseTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					return c.QueuePauseTx(ctx, tx, &twice.QueuePauseParams{Queue: "reports", Reason: s})
				})
			}},
			{"LimitSet", "job kind", twice.MaxKindBytes, func(s string) error {
				_, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: s, Global: &three})
				return err
			}},
			{"LimitSet", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: "billing.charge.v1", Global: &three, By: s})
				return err
			}},
			{"LimitSetTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.LimitSetTx(ctx, tx, &twice.LimitSetParams{Kind: "billing.charge.v1", Global: &three, Reason: s})
					return err
				})
			}},
			{"LimitReset", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.LimitReset(ctx, &twice.LimitResetParams{Kind: "billing.charge.v1", Reason: s})
				return err
			}},
			{"QueueConcurrencySet", "queue", twice.MaxQueueBytes, func(s string) error {
				_, err := c.QueueConcurrencySet(ctx, &twice.QueueConcurrencySetParams{Queue: s, Concurrency: 3})
				return err
			}},
			{"QueueConcurrencySetTx", "by", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.QueueConcurrencySetTx(ctx, tx, &twice.QueueConcurrencySetParams{Queue: "reports", Concurrency: 3, By: s})
					return err
				})
			}},
			{"QueueConcurrencyReset", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.QueueConcurrencyReset(ctx, &twice.QueueConcurrencyResetParams{Queue: "reports", Reason: s})
				return err
			}},
			{"LimitHistory", "job kind", twice.MaxKindBytes, func(s string) error {
				_, err := c.LimitHistory(ctx, &twice.LimitHistoryParams{Kind: s})
				return err
			}},
			{"QueueResume", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.QueueResume(ctx, &twice.QueueResumeParams{Queue: "reports", By: s})
				return err
			}},
			{"QueueResume", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.QueueResume(ctx, &twice.QueueResumeParams{Queue: "reports", Reason: s})
				return err
			}},
			{"QueueResumeTx", "by", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.QueueResumeTx(ctx, tx, &twice.QueueResumeParams{Queue: "reports", By: s})
					return err
				})
			}},
			{"ScheduleRemove", "schedule name", twice.MaxNameBytes, func(s string) error {
				return c.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: s})
			}},
			{"ScheduleRemove", "by", twice.MaxNameBytes, func(s string) error {
				return c.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "old-export", By: s})
			}},
			{"ScheduleRemove", "reason", twice.MaxReasonBytes, func(s string) error {
				return c.ScheduleRemove(ctx, &twice.ScheduleRemoveParams{Name: "old-export", Reason: s})
			}},
			{"ScheduleRemoveTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					return c.ScheduleRemoveTx(ctx, tx, &twice.ScheduleRemoveParams{Name: "old-export", Reason: s})
				})
			}},
			{"ScheduleTrigger", "schedule name", twice.MaxNameBytes, func(s string) error {
				_, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: s})
				return err
			}},
			{"ScheduleTrigger", "request id", twice.MaxNameBytes, func(s string) error {
				_, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", RequestID: s})
				return err
			}},
			{"ScheduleTrigger", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", By: s})
				return err
			}},
			{"ScheduleTrigger", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{Name: "monthly-report", Reason: s})
				return err
			}},
			{"ScheduleTriggerTx", "by", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.ScheduleTriggerTx(ctx, tx, &twice.ScheduleTriggerParams{Name: "monthly-report", By: s})
					return err
				})
			}},
			{"ToggleSet", "job kind", twice.MaxKindBytes, func(s string) error {
				return c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: s, Force: true})
			}},
			{"ToggleSet", "by", twice.MaxNameBytes, func(s string) error {
				return c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "report.monthly.v1", By: s})
			}},
			{"ToggleSet", "reason", twice.MaxReasonBytes, func(s string) error {
				return c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "report.monthly.v1", Reason: s})
			}},
			{"ToggleSet", "source", twice.MaxNameBytes, func(s string) error {
				return c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "report.monthly.v1", Source: s})
			}},
			{"ToggleSetTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					return c.ToggleSetTx(ctx, tx, &twice.ToggleSetParams{Kind: "report.monthly.v1", Reason: s})
				})
			}},
			{"ToggleUnset", "job kind", twice.MaxKindBytes, func(s string) error {
				_, err := c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: s})
				return err
			}},
			{"ToggleUnset", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1", By: s})
				return err
			}},
			{"ToggleUnset", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1", Reason: s})
				return err
			}},
			{"ToggleUnset", "source", twice.MaxNameBytes, func(s string) error {
				_, err := c.ToggleUnset(ctx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1", Source: s})
				return err
			}},
			{"ToggleUnsetTx", "by", twice.MaxNameBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.ToggleUnsetTx(ctx, tx, &twice.ToggleUnsetParams{Kind: "billing.charge.v1", By: s})
					return err
				})
			}},
			{"ToggleHistory", "job kind", twice.MaxKindBytes, func(s string) error {
				_, err := c.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: s})
				return err
			}},
			{"WorkflowList", "workflow state", twice.MaxNameBytes, func(s string) error {
				_, err := c.WorkflowList(ctx, &twice.WorkflowListOpts{State: twicetype.WorkflowState(s)})
				return err
			}},
			{"WorkflowCancel", "by", twice.MaxNameBytes, func(s string) error {
				_, err := c.WorkflowCancel(ctx, w.workflow, s, "why")
				return err
			}},
			{"WorkflowCancel", "reason", twice.MaxReasonBytes, func(s string) error {
				_, err := c.WorkflowCancel(ctx, w.workflow, "ops@test", s)
				return err
			}},
			{"WorkflowCancelTx", "reason", twice.MaxReasonBytes, func(s string) error {
				return inTx(func(tx any) error {
					_, err := c.WorkflowCancelTx(ctx, tx, w.workflow, "ops@test", s)
					return err
				})
			}},
		} {
			for _, bad := range badTexts(tc.limit) {
				err := tc.call(bad.value)
				what := fmt.Sprintf("%s with %s %s", tc.method, tc.field, bad.name)
				switch {
				case err == nil:
					t.Errorf("%s: no error, want ErrInvalidInput", what)
				case !errors.Is(err, twice.ErrInvalidInput):
					t.Errorf("%s: %q, want ErrInvalidInput", what, err)
				case !strings.Contains(err.Error(), tc.field+` "`):
					t.Errorf("%s: %q does not name the field", what, err)
				case strings.Contains(err.Error(), "SQLSTATE") || strings.Count(err.Error(), "twice: ") > 1:
					t.Errorf("%s: %q, want one prefix and no database error", what, err)
				}
				if after := adminSnapshot(t, c); after != before {
					t.Fatalf("%s changed the store:\nbefore\n%s\nafter\n%s", what, before, after)
				}
			}
		}
	})
}

// TestAdminBadTextCapsAreInclusive: text at the caps is accepted and
// stored whole, on both drivers.
func TestAdminBadTextCapsAreInclusive(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		by, reason := strings.Repeat("b", twice.MaxNameBytes), strings.Repeat("é", twice.MaxReasonBytes/2)
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "report.monthly.v1", By: by, Reason: reason}); err != nil {
			t.Fatal(err)
		}
		toggles, err := c.ToggleList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(toggles) != 1 || toggles[0].By != by || toggles[0].Reason != reason {
			t.Fatalf("stored %+v, want the by and reason at their caps", toggles)
		}
	})
}

// TestNewClientRefusesBadNodeID: a node id PostgreSQL cannot store would
// make a worker that fetches nothing, so NewClient refuses it.
func TestNewClientRefusesBadNodeID(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		for _, bad := range badTexts(twice.MaxNameBytes) {
			cfg := testConfig(adminRegistry(t))
			cfg.NodeID = bad.value
			_, err := twice.NewClient(store, cfg)
			if err == nil || !strings.Contains(err.Error(), `Config.NodeID "`) {
				t.Errorf("NodeID %s: %v, want an error naming Config.NodeID", bad.name, err)
			}
		}
		cfg := testConfig(adminRegistry(t))
		cfg.NodeID = strings.Repeat("n", twice.MaxNameBytes)
		if _, err := twice.NewClient(store, cfg); err != nil {
			t.Errorf("NodeID at the cap: %v", err)
		}
	})
}

// TestWorkflowNotFound: an unknown workflow id is a usage error naming the
// id, as an unknown job id is; it still matches twicestore.ErrNotFound.
func TestWorkflowNotFound(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		_, cancelErr := c.WorkflowCancel(ctx, 999999, "ops@test", "wrong input")
		_, getErr := c.WorkflowGet(ctx, 999999)
		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, txErr := c.WorkflowCancelTx(ctx, tx.Unwrap(), 999999, "ops@test", "wrong input")
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for name, err := range map[string]error{"WorkflowCancel": cancelErr, "WorkflowGet": getErr, "WorkflowCancelTx": txErr} {
			wantErr(t, err, twice.ErrWorkflowNotFound, twice.ErrInvalidInput, twicestore.ErrNotFound)
			if msg := err.Error(); !strings.Contains(msg, "workflow 999999") || !strings.Contains(msg, "WorkflowList") || strings.Contains(msg, "twicestore") {
				t.Errorf("%s: %q, want the id, a hint, and no store prefix", name, msg)
			}
		}
	})
}
