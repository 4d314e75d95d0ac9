package twice_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// finishedAt stores a job of kind that finished in state at the given time.
func finishedAt(t *testing.T, store twicestore.Store, state twicetype.JobState, at time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "test.old.v1", Queue: "old", MessageID: "m", Key: "k", MaxAttempts: 1, CreatedAt: at, RunAt: at,
	}}}); err != nil {
		t.Fatal(err)
	}
	res, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "old", Kinds: []string{"test.old.v1"}, Limit: 1,
		Node: "n", Now: at, LeaseUntil: at.Add(time.Minute)})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fetch: %v", err)
	}
	j := res.Jobs[0]
	o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: state, FinishedAt: at}
	if state == twicetype.JobStateDead {
		o.Error = &twicetype.AttemptError{Attempt: 1, At: at, Error: "boom"}
	}
	if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{o}}); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

func TestRetentionDeletesOldFinishedJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	now := time.Now()
	oldCompleted := finishedAt(t, store, twicetype.JobStateCompleted, now.Add(-2*time.Hour))
	newCompleted := finishedAt(t, store, twicetype.JobStateCompleted, now.Add(-time.Minute))
	ancientDead := finishedAt(t, store, twicetype.JobStateDead, now.Add(-1000*time.Hour))

	cfg := testConfig(nil)
	cfg.CompletedRetention = time.Hour
	cfg.DeadRetention = twice.KeepForever
	startClient(t, store, cfg) // the pruner runs once at start

	ctx := context.Background()
	var err error
	waitfor.Cond(t, "the old completed job to be deleted", func() bool {
		_, err = store.JobGet(ctx, &twicestore.JobGetParams{ID: oldCompleted})
		return errors.Is(err, twicestore.ErrNotFound)
	}, func() string { return fmt.Sprint(err) })
	for _, id := range []int64{newCompleted, ancientDead} {
		if _, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: id}); err != nil {
			t.Errorf("job %d within its retention was deleted: %v", id, err)
		}
	}
}

func TestRetentionRejectsNegativeWindows(t *testing.T) {
	t.Parallel()
	_, err := twice.NewClient(newStore(t), twice.Config{DeadRetention: -time.Hour})
	if err == nil {
		t.Fatal("a negative DeadRetention was accepted")
	}
}

// TestRetentionDeletesOldCancelledJobs: cancelled jobs are kept for
// DiscardedRetention, like discarded ones, then deleted (they were kept
// for ever before).
func TestRetentionDeletesOldCancelledJobs(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	now := time.Now()
	oldCancelled := finishedAt(t, store, twicetype.JobStateCancelled, now.Add(-twice.DiscardedRetentionDefault-time.Hour))
	newCancelled := finishedAt(t, store, twicetype.JobStateCancelled, now.Add(-time.Hour))
	startClient(t, store, testConfig(nil)) // the pruner runs once at start

	ctx := context.Background()
	var err error
	waitfor.Cond(t, "the old cancelled job to be deleted", func() bool {
		_, err = store.JobGet(ctx, &twicestore.JobGetParams{ID: oldCancelled})
		return errors.Is(err, twicestore.ErrNotFound)
	}, func() string { return fmt.Sprint(err) })
	if _, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: newCancelled}); err != nil {
		t.Errorf("cancelled job within its retention was deleted: %v", err)
	}
}

// TestRetentionPrunesWhatJobsLeaveBehind: the pruner deletes a workflow
// and a batch once their jobs were deleted by retention, the switch and
// limit history older than ToggleHistoryRetention (but a switch's or an
// override's newest change), and nodes dead for longer than a generous bound; what is
// recent stays.
func TestRetentionPrunesWhatJobsLeaveBehind(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		now := time.Now()
		old := now.Add(-2 * time.Hour)
		finishAll := func(kind string) {
			t.Helper()
			res, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "old", Kinds: []string{kind}, Limit: 10,
				Node: "n", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
			if err != nil || len(res.Jobs) == 0 {
				t.Fatalf("fetch %s: %d jobs, %v", kind, len(res.Jobs), err)
			}
			var outcomes []*twicestore.JobOutcome
			for _, j := range res.Jobs {
				outcomes = append(outcomes, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch,
					State: twicetype.JobStateCompleted, FinishedAt: old})
			}
			if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
				t.Fatal(err)
			}
		}
		job := func(kind string) *twicestore.JobInsertParams {
			return &twicestore.JobInsertParams{Kind: kind, Queue: "old", MessageID: "m", MaxAttempts: 1, CreatedAt: old, RunAt: old}
		}
		wf, err := store.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "old", CreatedAt: old,
			Tasks: []*twicestore.WorkflowTaskParams{{Name: "a", Job: job("test.task.v1")}}})
		if err != nil {
			t.Fatal(err)
		}
		live, err := store.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "live", CreatedAt: now,
			Tasks: []*twicestore.WorkflowTaskParams{{Name: "a", Job: job("test.live.v1")}}})
		if err != nil {
			t.Fatal(err)
		}
		finishAll("test.task.v1")
		batch, err := store.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: job("test.callback.v1"),
			Jobs: []*twicestore.JobInsertParams{job("test.member.v1")}, CreatedAt: old})
		if err != nil {
			t.Fatal(err)
		}
		finishAll("test.member.v1")
		finishAll("test.callback.v1")
		for _, at := range []time.Time{now.Add(-100 * 24 * time.Hour), now.Add(-99 * 24 * time.Hour)} {
			if err := store.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{Kind: "test.task.v1", By: "ops", At: at}}); err != nil {
				t.Fatal(err)
			}
		}
		for i, at := range []time.Time{now.Add(-100 * 24 * time.Hour), now.Add(-99 * 24 * time.Hour)} {
			if _, err := store.LimitOverrideSet(ctx, &twicestore.LimitOverrideSetParams{Override: twicetype.LimitOverride{
				Scope: twicetype.LimitScopeQueue, Name: "old", LimitSetting: twicetype.LimitSetting{Concurrency: i + 1}, By: "ops", At: at}}); err != nil {
				t.Fatal(err)
			}
		}
		for id, hb := range map[string]time.Time{"dead": now.Add(-30 * 24 * time.Hour), "recent": now.Add(-time.Hour)} {
			if err := store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{ID: id, StartedAt: hb, HeartbeatAt: hb}}); err != nil {
				t.Fatal(err)
			}
		}

		cfg := testConfig(nil)
		cfg.CompletedRetention = time.Hour
		startClient(t, store, cfg) // the pruner runs once at start

		var left string
		waitfor.Cond(t, "the old workflow, batch, history and node to be deleted", func() bool {
			_, wfErr := store.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: wf.Workflow.ID})
			_, bErr := store.BatchGet(ctx, &twicestore.BatchGetParams{ID: batch.Batch.ID})
			history, err := store.ToggleHistory(ctx, &twicestore.ToggleHistoryParams{Kind: "test.task.v1"})
			if err != nil {
				t.Fatal(err)
			}
			limits, err := store.LimitHistory(ctx, &twicestore.LimitHistoryParams{})
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := store.NodeList(ctx, &twicestore.NodeListParams{})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, n := range nodes {
				if n.ID == "dead" || n.ID == "recent" {
					ids = append(ids, n.ID)
				}
			}
			left = fmt.Sprintf("workflow: %v; batch: %v; history rows: %d; limit history rows: %d; nodes: %v",
				wfErr, bErr, len(history.Changes), len(limits.Changes), ids)
			return errors.Is(wfErr, twicestore.ErrNotFound) && errors.Is(bErr, twicestore.ErrNotFound) &&
				len(history.Changes) == 1 && len(limits.Changes) == 1 && len(ids) == 1 && ids[0] == "recent"
		}, func() string { return left })
		if _, err := store.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: live.Workflow.ID}); err != nil {
			t.Fatalf("a workflow with a job waiting was deleted: %v", err)
		}
	})
}

// cursorSpy records the cursors each JobDeleteFinished batch of a pass
// was given and handed back.
type cursorSpy struct {
	twicestore.Store
	mu           sync.Mutex
	given, after []map[twicetype.JobState]int64
	deleted      []int
}

func (s *cursorSpy) JobDeleteFinished(ctx context.Context, p *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	given := maps.Clone(p.After)
	res, err := s.Store.JobDeleteFinished(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.given, s.after, s.deleted = append(s.given, given), append(s.after, maps.Clone(res.After)), append(s.deleted, res.Deleted)
		s.mu.Unlock()
	}
	return res, err
}

// TestRetentionPassGoesOnFromItsCursor: a pass of more than one batch
// hands each batch the cursor the batch before returned, so no batch
// reads again past the jobs deleted before it; the pass starts with none.
func TestRetentionPassGoesOnFromItsCursor(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := t.Context()
	const n = 1500 // more than one batch
	long := time.Now().Add(-48 * time.Hour)
	params := make([]*twicestore.JobInsertParams, n)
	for i := range params {
		params[i] = &twicestore.JobInsertParams{Kind: "test.old.v1", Queue: "old", MessageID: fmt.Sprint(i), Key: fmt.Sprint(i),
			MaxAttempts: 1, CreatedAt: long, RunAt: long}
	}
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		res, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "old", Kinds: []string{"test.old.v1"}, Limit: 500,
			Node: "n", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
		if err != nil || len(res.Jobs) == 0 {
			t.Fatalf("fetch: %d jobs, %v", len(res.Jobs), err)
		}
		outcomes := make([]*twicestore.JobOutcome, len(res.Jobs))
		for i, j := range res.Jobs {
			outcomes[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: long}
		}
		if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
			t.Fatal(err)
		}
		done += len(res.Jobs)
	}
	spy := &cursorSpy{Store: store}
	startClient(t, spy, testConfig(nil)) // the pruner runs once at start
	waitfor.Cond(t, "the pass's batches to delete every old job", func() bool {
		spy.mu.Lock()
		defer spy.mu.Unlock()
		return len(spy.deleted) >= 2 && spy.deleted[0]+spy.deleted[1] == n
	}, func() string { spy.mu.Lock(); defer spy.mu.Unlock(); return fmt.Sprint(spy.deleted) })
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if spy.given[0] != nil {
		t.Errorf("the pass's first batch was given the cursor %v, want none", spy.given[0])
	}
	if !maps.Equal(spy.given[1], spy.after[0]) || spy.after[0][twicetype.JobStateCompleted] == 0 {
		t.Errorf("the second batch was given %v, want the cursor the first returned, %v", spy.given[1], spy.after[0])
	}
}
