package twicepg

import (
	"context"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
)

// TestListenCancels: a cancel of a running job, asked through another
// node's store, reaches a listener at once with the job's id; a cancel of
// an available job (cancelled at once, with no worker to tell) and a
// cancel rolled back send nothing. Only the first notification after the
// listener is up is awaited; no time is asserted.
func TestListenCancels(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)

	heard := make(chan int64, 16)
	listening := startListening(t, s, "ListenCancels", func(ctx context.Context) error {
		return s.ListenCancels(ctx, func(id int64) { heard <- id })
	})
	waitfor.Recv(t, listening, "ListenCancels to start listening")

	const kind = "test.listencancel.v1"
	now := time.Now()
	ins, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: kind, Queue: "default", MaxAttempts: 1, CreatedAt: now},
		{Kind: kind, Queue: "default", MaxAttempts: 1, CreatedAt: now},
		{Kind: kind, Queue: "other", MaxAttempts: 1, CreatedAt: now},
	}})
	if err != nil {
		t.Fatal(err)
	}
	fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind}, Limit: 2,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != 2 {
		t.Fatalf("fetch: %+v, %v", fetched, err)
	}
	rolledBack, running := fetched.Jobs[0].ID, fetched.Jobs[1].ID
	available := ins.Jobs[2].Job.ID

	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{rolledBack}}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{available}}}); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	if _, err := other.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{running}}, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	// Notifications arrive in commit order: the first one heard is the
	// running job's only if neither earlier cancel sent one.
	if id := waitfor.Recv(t, heard, "a cancel notification"); id != running {
		t.Fatalf("heard a cancel for job %d, want %d (the running one)", id, running)
	}
	t.Logf("cancel heard %s after JobCancel began", time.Since(asked))
}
