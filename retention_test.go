package twice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/waitfor"
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
