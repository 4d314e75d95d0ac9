package twicepg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestListenFinished: the finish of an awaited job is notified, with its
// id, to a listener of its schema; a job nobody awaits finishes silently
// (the first notification heard is the awaited job's, though the other
// finished first).
func TestListenFinished(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	heard := make(chan int64, 4)
	listening := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	lctx, stop := context.WithCancel(ctx)
	wg.Go(func() {
		_ = s.ListenFinished(lctx, func(id int64) { heard <- id }, func() { once.Do(func() { close(listening) }) })
	})
	defer wg.Wait()
	defer stop()
	<-listening

	now := time.Now()
	ids := make([]int64, 2)
	for i := range ids {
		res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
			Kind: "k", Queue: "default", Args: []byte(`{}`), MessageID: uuid.NewString(), Key: uuid.NewString(),
			MaxAttempts: 1, RunAt: now, CreatedAt: now,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.Jobs[0].Job.ID
	}
	fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"k"}, Limit: 2,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != 2 {
		t.Fatalf("fetch = %v, %v", fetched, err)
	}
	out, err := s.JobAwait(ctx, &twicestore.JobGetParams{ID: ids[1]})
	if err != nil || out.State != twicetype.JobStateRunning {
		t.Fatalf("JobAwait = %+v, %v", out, err)
	}
	for _, j := range fetched.Jobs { // the unawaited one first
		if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
			ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now, Output: []byte(`1`),
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case id := <-heard:
		if id != ids[1] {
			t.Fatalf("heard job %d finish, want only the awaited job %d", id, ids[1])
		}
	case <-ctx.Done():
		t.Fatal("the awaited job's finish was not notified")
	}
}

// TestStepClaimInTxLeavesHeartbeats: a transactional step's claim
// (FenceWithoutLock) does not hold its job's row, so the job's heartbeat
// goes through while the step's transaction is still open; the receipt's
// locking fence then holds off a rescue until the commit.
func TestStepClaimInTxLeavesHeartbeats(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	now := time.Now()
	if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "k", Queue: "default", Args: []byte(`{}`), MessageID: uuid.NewString(), Key: "key",
		MaxAttempts: 1, RunAt: now, CreatedAt: now,
	}}}); err != nil {
		t.Fatal(err)
	}
	fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"k"}, Limit: 1,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != 1 {
		t.Fatalf("fetch = %v, %v", fetched, err)
	}
	j := fetched.Jobs[0]
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	p := &twicestore.StepParams{Handler: "h", Key: "key", Step: "ledger", Strategy: "transactional",
		JobID: j.ID, Epoch: j.Epoch, FenceWithoutLock: true}
	if res, err := tx.StepClaim(ctx, p); err != nil || !res.Claimed {
		t.Fatalf("claim in tx = %+v, %v", res, err)
	}
	res, err := s.JobExtendLease(ctx, &twicestore.JobExtendLeaseParams{
		Leases: []twicestore.JobLease{{ID: j.ID, Epoch: j.Epoch}}, LeaseUntil: now.Add(2 * time.Minute)})
	if err != nil || len(res.Extended) != 1 {
		t.Fatalf("heartbeat while the step's transaction is open = %+v, %v; want it extended at once", res, err)
	}
	p.FenceWithoutLock, p.Receipt = false, []byte(`1`)
	if err := tx.StepComplete(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
