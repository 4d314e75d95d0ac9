package twicemysql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// twoStores opens two stores (two pools, as two processes would have) on
// one fresh database.
func twoStores(t *testing.T) (a, b *Store) {
	t.Helper()
	dsn, _ := mysqltest.Database(t, "twice_wake")
	for _, s := range []**Store{&a, &b} {
		var err error
		if *s, err = Open(t.Context(), dsn); err != nil {
			t.Fatal(err)
		}
		store := *s
		t.Cleanup(func() { _ = store.Close() })
	}
	return a, b
}

// TestListenInsertsHearsAnotherPool: a job inserted through one pool wakes
// the listener of another with its queue, and the listener stops with its
// context.
func TestListenInsertsHearsAnotherPool(t *testing.T) {
	listener, writer := twoStores(t)
	ctx, cancel := context.WithCancel(t.Context())
	queues := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- listener.ListenInserts(ctx, func(q string) { queues <- q }) }()

	// The listener reads the newest id on its first poll; insert until it
	// hears one, so the test does not depend on that first poll's timing.
	insert := func(queue string) {
		_, err := writer.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
			{Kind: "wake.v1", Queue: queue, Args: []byte(`{}`), MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	heard := map[string]bool{}
	waitfor.Cond(t, "the listener hears an insert into queue q1", func() bool {
		insert("q1")
		for {
			select {
			case q := <-queues:
				heard[q] = true
			default:
				return heard["q1"]
			}
		}
	}, nil)
	insert("q2")
	for q := waitfor.Recv(t, queues, "an insert into q2"); q != "q2"; q = waitfor.Recv(t, queues, "an insert into q2") {
		if q != "q1" {
			t.Fatalf("heard queue %q, which no job was inserted into", q)
		}
	}
	cancel()
	if err := waitfor.Recv(t, done, "ListenInserts to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("ListenInserts returned %v, want context.Canceled", err)
	}
}

// TestListenTogglesHearsASwitch: a kill switch set through one pool wakes
// the toggle listener of another.
func TestListenTogglesHearsASwitch(t *testing.T) {
	listener, writer := twoStores(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	flips := make(chan struct{}, 16)
	go func() { _ = listener.ListenToggles(ctx, func() { flips <- struct{}{} }) }()
	waitfor.Cond(t, "the listener hears a switch flip", func() bool {
		err := writer.ToggleSet(t.Context(), &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
			Kind: "wake.v1", Enabled: false, Reason: "test", At: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-flips:
			return true
		default:
			return false
		}
	}, nil)
}
