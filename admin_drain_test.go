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

// drainKind is the retired version the drain tests look at: no client in
// them registers it, as after a deploy that moved to v2.
const drainKind = "drain.old.v1"

// drainInsert inserts one job of drainKind due at runAt.
func drainInsert(t *testing.T, store twicestore.Store, runAt time.Time) *twicetype.JobRow {
	t.Helper()
	now := time.Now()
	res, err := store.JobInsertMany(context.Background(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: drainKind, Queue: "default", Args: []byte(`{}`), MaxAttempts: 5, RunAt: runAt, CreatedAt: now,
		MessageID: fmt.Sprint(now.UnixNano()), Key: fmt.Sprint(now.UnixNano()),
	}}})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res.Jobs[0].Job
}

// drainFetch leases the due jobs of drainKind as node "w".
func drainFetch(t *testing.T, store twicestore.Store) []*twicetype.JobRow {
	t.Helper()
	now := time.Now()
	res, err := store.JobFetch(context.Background(), &twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{drainKind}, Limit: 10, Node: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return res.Jobs
}

// drainFinish writes one outcome for a leased job.
func drainFinish(t *testing.T, store twicestore.Store, j *twicetype.JobRow, state twicetype.JobState, runAt time.Time) {
	t.Helper()
	o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: state, RunAt: runAt}
	if state != twicetype.JobStateAvailable {
		o.FinishedAt = time.Now()
	} else {
		o.Error = &twicetype.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "boom"}
	}
	res, err := store.JobFinish(context.Background(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{o}})
	if err != nil || !res.Applied[0] {
		t.Fatalf("finish job %d as %s: %v %+v", j.ID, state, err, res)
	}
}

func drainClient(t *testing.T, store twicestore.Store) *twice.Client {
	t.Helper()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[monthlyReportArgs](func(context.Context, *twice.Job[monthlyReportArgs]) error { return nil }), nil)
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func drainReport(t *testing.T, c *twice.Client) *twice.KindDrainReport {
	t.Helper()
	r, err := c.KindDrain(context.Background(), drainKind)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	return r
}

// TestKindDrain is the proof on every store: a kind version with
// nothing left is safe to remove; one scheduled job, one retry, a dead
// job, a parked one or a live worker registering it each make it not safe,
// naming what holds it.
func TestKindDrain(t *testing.T) {
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			c := drainClient(t, store)

			// A kind known nowhere is bad input, with the closest kind.
			_, err := c.KindDrain(ctx, drainKind)
			if !errors.Is(err, twice.ErrUnknownKind) || !errors.Is(err, twice.ErrInvalidInput) {
				t.Fatalf("drain of a kind with no jobs and no catalog entry: err = %v, want ErrUnknownKind", err)
			}

			// One job that ran and completed: nothing holds v1.
			done := drainInsert(t, store, time.Now().Add(-time.Second))
			leased := drainFetch(t, store)
			if len(leased) != 1 {
				t.Fatalf("leased %d jobs, want 1", len(leased))
			}
			r := drainReport(t, c)
			if r.Safe || r.Running != 1 || r.Reason != fmt.Sprintf("not safe: 1 running (job %d)", done.ID) {
				t.Fatalf("running job: report %+v", r)
			}
			drainFinish(t, store, leased[0], twicetype.JobStateCompleted, time.Time{})
			r = drainReport(t, c)
			if !r.Safe || r.Reason != "safe to remove" {
				t.Fatalf("after the last job completed: safe %t, reason %q, want safe", r.Safe, r.Reason)
			}

			_, err = c.KindDrain(ctx, "drain.olb.v1")
			if !errors.Is(err, twice.ErrUnknownKind) || !strings.Contains(err.Error(), "did you mean "+drainKind) {
				t.Fatalf("misspelled kind: err = %v, want ErrUnknownKind suggesting %s", err, drainKind)
			}

			// One job delayed at enqueue: scheduled, not yet run.
			later := drainInsert(t, store, time.Now().Add(time.Hour))
			r = drainReport(t, c)
			if want := fmt.Sprintf("not safe: 1 scheduled (job %d)", later.ID); r.Safe || r.Reason != want || r.Scheduled != 1 {
				t.Fatalf("scheduled job: reason %q, want %q (%+v)", r.Reason, want, r)
			}
			cancelled, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{later.ID}, By: "test", Reason: "drain"})
			if err != nil || cancelled.Err() != nil {
				t.Fatalf("cancel: %v %v", err, cancelled)
			}

			// One job that failed and waits out its backoff: retrying.
			retry := drainInsert(t, store, time.Now().Add(-time.Second))
			drainFinish(t, store, drainFetch(t, store)[0], twicetype.JobStateAvailable, time.Now().Add(time.Hour))
			r = drainReport(t, c)
			if want := fmt.Sprintf("not safe: 1 retrying (job %d)", retry.ID); r.Safe || r.Reason != want || r.Retrying != 1 || r.Scheduled != 0 {
				t.Fatalf("retrying job: reason %q, want %q (%+v)", r.Reason, want, r)
			}
			if _, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{retry.ID}, By: "test", Reason: "drain"}); err != nil {
				t.Fatal(err)
			}

			// A dead job holds the kind until it is discarded.
			dead := drainInsert(t, store, time.Now().Add(-time.Second))
			drainFinish(t, store, drainFetch(t, store)[0], twicetype.JobStateDead, time.Time{})
			r = drainReport(t, c)
			if want := fmt.Sprintf("not safe: 1 dead (job %d)", dead.ID); r.Reason != want || r.Dead != 1 {
				t.Fatalf("dead job: reason %q, want %q", r.Reason, want)
			}
			if _, err := c.JobDiscard(ctx, &twice.JobActionParams{IDs: []int64{dead.ID}, By: "test", Reason: "drain"}); err != nil {
				t.Fatal(err)
			}
			if r = drainReport(t, c); !r.Safe {
				t.Fatalf("after the discard: %q, want safe", r.Reason)
			}

			// A waiting job, and two live workers that still register v1.
			waiting := drainInsert(t, store, time.Now().Add(-time.Second))
			for _, id := range []string{"node-b", "node-a"} {
				if err := store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{
					ID: id, Host: "h", PID: 1, Kinds: []string{drainKind, "drain.new.v2"}, Queues: []string{"default"},
					StartedAt: time.Now(), HeartbeatAt: time.Now()}}); err != nil {
					t.Fatal(err)
				}
			}
			r = drainReport(t, c)
			want := fmt.Sprintf("not safe: 1 waiting (job %d), 2 workers register it (node-a, node-b)", waiting.ID)
			if r.Safe || r.Reason != want || r.Waiting != 1 || len(r.Workers) != 2 {
				t.Fatalf("waiting job and live workers: reason %q, want %q", r.Reason, want)
			}
		})
	}
}

// TestKindDrainBadInput refuses an empty kind and bytes no store keeps as
// usage errors.
func TestKindDrainBadInput(t *testing.T) {
	c := drainClient(t, newStore(t))
	for _, kind := range []string{"", "  ", "bad\x00kind"} {
		if _, err := c.KindDrain(context.Background(), kind); !errors.Is(err, twice.ErrInvalidInput) {
			t.Errorf("KindDrain(%q): err = %v, want ErrInvalidInput", kind, err)
		}
	}
}

// TestKindDrainWorkflowTask: a task of the kind in a running workflow,
// waiting for a dependency, holds the kind though no job of it exists yet;
// once the workflow is cancelled it holds nothing.
func TestKindDrainWorkflowTask(t *testing.T) {
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			c := drainClient(t, store)
			now := time.Now()
			job := func(kind string) *twicestore.JobInsertParams {
				return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MessageID: kind, Key: kind,
					MaxAttempts: 1, RunAt: now, CreatedAt: now}
			}
			wf, err := store.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "signup", CreatedAt: now,
				Tasks: []*twicestore.WorkflowTaskParams{
					{Name: "first", Job: job("drain.new.v2")},
					{Name: "then", Deps: []string{"first"}, Job: job(drainKind)},
				}})
			if err != nil {
				t.Fatal(err)
			}
			r := drainReport(t, c)
			want := fmt.Sprintf("not safe: 1 task in open workflows (workflow %d)", wf.Workflow.ID)
			if r.Safe || r.Reason != want || r.WorkflowTasks != 1 {
				t.Fatalf("a waiting workflow task: reason %q, want %q", r.Reason, want)
			}
			if _, err := c.WorkflowCancel(ctx, wf.Workflow.ID, "test", "drain"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.KindDrain(ctx, drainKind); !errors.Is(err, twice.ErrUnknownKind) {
				t.Fatalf("after the cancel nothing names the kind: err = %v, want ErrUnknownKind", err)
			}
		})
	}
}

// TestKindDrainBatchCallback: the callback of an unfinished batch holds
// its kind before its job exists, open or sealed with jobs pending; once
// the batch finishes the callback is a job, counted as such.
func TestKindDrainBatchCallback(t *testing.T) {
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			c := drainClient(t, store)
			now := time.Now()
			job := func(kind, id string) *twicestore.JobInsertParams {
				return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MessageID: id, Key: id,
					MaxAttempts: 1, RunAt: now, CreatedAt: now}
			}
			b, err := store.BatchInsert(ctx, &twicestore.BatchInsertParams{Open: true, CreatedAt: now,
				Callback: job(drainKind, "callback"), Jobs: []*twicestore.JobInsertParams{job("drain.new.v2", "member")}})
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("not safe: 1 callback of unfinished batches (batch %d)", b.Batch.ID)
			for _, step := range []string{"open", "sealed"} {
				r := drainReport(t, c)
				if r.Safe || r.Reason != want || r.BatchCallbacks != 1 || len(r.Batches) != 1 || r.Batches[0] != b.Batch.ID {
					t.Fatalf("%s batch: %+v, want reason %q", step, r, want)
				}
				if _, err := store.BatchSeal(ctx, &twicestore.BatchSealParams{ID: b.Batch.ID, Now: now}); err != nil {
					t.Fatal(err)
				}
			}
			member := b.Jobs[0].Job
			if _, err := c.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{member.ID}, By: "test", Reason: "finish the batch"}); err != nil {
				t.Fatal(err)
			}
			r := drainReport(t, c)
			if r.Safe || r.BatchCallbacks != 0 || r.Waiting != 1 || !strings.HasPrefix(r.Reason, "not safe: 1 waiting") {
				t.Fatalf("finished batch: the callback is a waiting job now: %+v", r)
			}
		})
	}
}
