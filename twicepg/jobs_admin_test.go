package twicepg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestDeleteFinishedConcurrently has two nodes clean up at once: while one
// holds its batch in an open transaction, the other deletes the rest without
// waiting for it, and neither deletes a job twice.
func TestDeleteFinishedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := openStore(t)
	const kind, n = "test.cleanup.v1", 6
	jobs := make([]*twicestore.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = &twicestore.JobInsertParams{Kind: kind, Queue: "default", MaxAttempts: 1}
	}
	if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind}, Limit: n,
		Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != n {
		t.Fatalf("fetch = %+v, %v", fetched, err)
	}
	var outcomes []*twicestore.JobOutcome
	for _, j := range fetched.Jobs {
		outcomes = append(outcomes, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch,
			State: twicetype.JobStateCompleted, FinishedAt: now.Add(-time.Hour)})
	}
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
		t.Fatal(err)
	}

	p := &twicestore.JobDeleteFinishedParams{CompletedBefore: now, Limit: n / 2}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	first, err := tx.JobDeleteFinished(ctx, p)
	if err != nil || first.Deleted != n/2 {
		t.Fatalf("first cleaner = %+v, %v; want %d deleted", first, err, n/2)
	}

	// Waiting for the first cleaner's row locks would outlast this.
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.Limit = n
	second, err := s.JobDeleteFinished(quick, p)
	if err != nil || second.Deleted != n/2 {
		t.Fatalf("second cleaner = %+v, %v; want the other %d deleted at once", second, err, n/2)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	count, err := s.JobCount(ctx, &twicestore.JobCountParams{})
	if err != nil || len(count.Counts) != 0 {
		t.Fatalf("after both cleaners: counts %+v, %v; want no job left", count, err)
	}
}

// TestMarkerPruneConcurrently is TestDeleteFinishedConcurrently for markers.
func TestMarkerPruneConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := openStore(t)
	const n = 6
	old := time.Now().Add(-time.Hour)
	for i := range n {
		if _, err := s.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "h", Key: fmt.Sprint(i), Now: old}); err != nil {
			t.Fatal(err)
		}
	}
	p := &twicestore.MarkerPruneParams{Before: time.Now(), Limit: n / 2}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if first, err := tx.MarkerPrune(ctx, p); err != nil || first.Deleted != n/2 {
		t.Fatalf("first pruner = %+v, %v; want %d deleted", first, err, n/2)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p.Limit = 0 // no limit
	if second, err := s.MarkerPrune(quick, p); err != nil || second.Deleted != n/2 {
		t.Fatalf("second pruner = %+v, %v; want the other %d deleted at once", second, err, n/2)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if res, err := s.MarkerPeek(ctx, &twicestore.MarkerParams{Handler: "h", Key: fmt.Sprint(i)}); err != nil || res.Processed {
			t.Errorf("marker %d after both pruners: %+v, %v; want gone", i, res, err)
		}
	}
}
