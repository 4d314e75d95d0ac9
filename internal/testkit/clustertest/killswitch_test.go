package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestKillSwitchFlipReachesAnotherProcess: a switch flipped in the store by
// this process holds, then releases, the jobs of a worker process, with
// their attempts unspent.
func TestKillSwitchFlipReachesAnotherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testKillSwitchFlip)
}

func testKillSwitchFlip(t *testing.T, b *backend) {
	c := newCluster(t, b)
	ctx := context.Background()
	flip := func(on bool, reason string) {
		t.Helper()
		if err := c.store.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
			Kind: emailArgs{}.Kind(), Enabled: on, Reason: reason, By: "clustertest", At: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(args twice.Args) int64 {
		t.Helper()
		res, err := producer.Enqueue(ctx, args, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}

	flip(false, "incident drill")
	c.start("switch-worker")
	email := enqueue(emailArgs{Seq: 1})
	credit := enqueue(creditArgs{CreditID: 1})
	c.waitCompleted(1, time.Minute) // the credit: the worker is up and working

	// The email stays held however long the worker runs; the credit that
	// came after it completed.
	row, err := c.store.JobGet(ctx, &twicestore.JobGetParams{ID: email})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateAvailable || row.Attempt != 0 {
		t.Fatalf("email while switched off: state=%s attempt=%d, want held", row.State, row.Attempt)
	}
	if got, _ := c.store.JobGet(ctx, &twicestore.JobGetParams{ID: credit}); got.State != twicetype.JobStateCompleted {
		t.Fatalf("credit state = %s, want completed", got.State)
	}

	flip(true, "drill over")
	c.waitCompleted(2, 30*time.Second) // within the worker's poll of the store
	row, err = c.store.JobGet(ctx, &twicestore.JobGetParams{ID: email})
	if err != nil {
		t.Fatal(err)
	}
	if row.Attempt != 1 {
		t.Errorf("email attempt = %d, want 1: being held must not spend attempts", row.Attempt)
	}
	if n := c.count(`SELECT count(*) FROM sent_emails WHERE email_id = 1`); n != 1 {
		t.Errorf("email sent %d times, want 1", n)
	}
}
