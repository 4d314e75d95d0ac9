package twicepg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func TestNotifierDue(t *testing.T) {
	t.Parallel()
	base := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	n := newNotifier("public")
	const iv = notifyInterval
	for _, step := range []struct {
		at     time.Duration
		queues []string
		want   []string
	}{
		{0, []string{"a", "b", "a"}, []string{"a", "b"}}, // once per distinct queue
		{iv / 4, []string{"a"}, []string{}},              // too soon
		{iv / 2, []string{"a", "c"}, []string{"c"}},      // a new queue is due at once
		{iv, []string{"a", "b"}, []string{"a", "b"}},     // the interval has passed
		{iv + iv/4, []string{"c"}, []string{}},           // c was notified at iv/2
		{iv - time.Hour, []string{"a"}, []string{"a"}},   // the clock went back
		{2*iv + iv/2, []string{"c"}, []string{"c"}},      // c's interval has passed
	} {
		got := n.due(step.queues, base.Add(step.at))
		if got == nil || !slices.Equal(got, step.want) {
			t.Errorf("at %v, due(%v) = %#v, want %#v", step.at, step.queues, got, step.want)
		}
	}
}

func TestChannelFor(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", 63)
	for _, tc := range []struct{ schema, want string }{
		{"public", "twice_insert"},
		{"twice", "twice_insert.twice"},
	} {
		if got := channelFor(tc.schema); got != tc.want {
			t.Errorf("channelFor(%q) = %q, want %q", tc.schema, got, tc.want)
		}
	}
	if a, b := channelFor(long), channelFor(long+"x"); len(a) > 63 || len(b) > 63 || a == b {
		t.Errorf("long schema names give channels %q and %q; want distinct names of at most 63 bytes", a, b)
	}
}

// TestListenInserts: a listener hears inserts committed by another
// process's store, never one rolled back, and keeps listening after its
// connection is killed.
func TestListenInserts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString) // another node: its own pool and notifier

	heard := make(chan string, 64)
	listening := startListening(t, s, "ListenInserts", func(ctx context.Context) error {
		return s.ListenInserts(ctx, func(queue string) { heard <- queue })
	})

	waitListening := func() uint32 {
		t.Helper()
		return waitfor.Recv(t, listening, "ListenInserts to listen")
	}
	insert := func(ex twicestore.Executor, queue string) {
		t.Helper()
		if _, err := ex.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
			{Kind: "test.listen.v1", Queue: queue, MaxAttempts: 1},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(queue string) {
		t.Helper()
		if q := waitfor.Recv(t, heard, fmt.Sprintf("a notification for queue %q", queue)); q != queue {
			t.Fatalf("heard queue %q, want %q", q, queue)
		}
	}

	first := waitListening()
	insert(other, "emails")
	expect("emails")

	// Inside a transaction the notification waits for the commit, and a
	// rollback never sends it: the next one heard is the later insert's.
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert(tx, "rolled-back")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert(tx, "committed")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expect("committed")

	// Kill the listener's backend, as a failover or an operator would.
	var killed bool
	if err := other.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(first)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", first, killed, err)
	}
	if second := waitListening(); second == first {
		t.Fatalf("listening again on backend %d, the one killed", second)
	}
	insert(other, "after-reconnect")
	expect("after-reconnect")
}

// TestCloseSendsPendingWakeUps: a store that inserts and closes at once,
// as a short-lived process does ('twice enqueue', a script, a serverless
// handler), still wakes the workers: Close sends the notifications of the
// inserts it committed before it closes the pool. Before, the sender's
// statement found the pool closed and the wake-up was lost; the workers
// saw the job only at their next poll.
func TestCloseSendsPendingWakeUps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	listener, connString := openStore(t)
	heard := make(chan string, 64)
	listening := startListening(t, listener, "ListenInserts", func(ctx context.Context) error {
		return listener.ListenInserts(ctx, func(queue string) { heard <- queue })
	})
	waitfor.Recv(t, listening, "ListenInserts to listen")

	for i := range 5 {
		queue := fmt.Sprint("short-lived-", i)
		s, err := Open(ctx, poolOf(t, connString))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
			{Kind: "test.listen.v1", Queue: queue, MaxAttempts: 1},
		}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if q := waitfor.Recv(t, heard, fmt.Sprintf("the wake-up of queue %q, inserted by a store closed at once", queue)); q != queue {
			t.Fatalf("heard queue %q, want %q", q, queue)
		}
	}
}

// TestListenToggles: a listener hears a kill switch set and deleted by
// another node's store.
func TestListenToggles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)

	heard := make(chan struct{}, 8)
	listening := startListening(t, s, "ListenToggles", func(ctx context.Context) error {
		return s.ListenToggles(ctx, func() { heard <- struct{}{} })
	})
	waitfor.Recv(t, listening, "ListenToggles to listen")
	expect := func(what string) {
		t.Helper()
		waitfor.Recv(t, heard, "a notification for "+what)
	}
	if err := other.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{Kind: "a.b.v1", Reason: "drill"}}); err != nil {
		t.Fatal(err)
	}
	expect("a set")
	if err := other.ToggleDelete(ctx, &twicestore.ToggleDeleteParams{Kind: "a.b.v1"}); err != nil {
		t.Fatal(err)
	}
	expect("a delete")
}

// TestListenInsertsBurst: a burst of concurrent inserts on the Store's pool
// into several queues, which the sender coalesces into fewer notification
// statements, still has every queue notified after its insert committed.
func TestListenInsertsBurst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)

	heard := make(chan string, 1024)
	listening := startListening(t, s, "ListenInserts", func(ctx context.Context) error {
		return s.ListenInserts(ctx, func(queue string) { heard <- queue })
	})
	waitfor.Recv(t, listening, "ListenInserts to listen")

	queues := []string{"q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7"}
	errs := make(chan error, len(queues)*4)
	for range 4 {
		for _, q := range queues {
			go func() {
				_, err := other.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
					{Kind: "test.burst.v1", Queue: q, MaxAttempts: 1},
				}})
				errs <- err
			}()
		}
	}
	for range len(queues) * 4 {
		if err := waitfor.Recv(t, errs, "an insert to return"); err != nil {
			t.Fatal(err)
		}
	}
	missing := map[string]bool{}
	for _, q := range queues {
		missing[q] = true
	}
	for len(missing) > 0 {
		delete(missing, waitfor.Recv(t, heard, fmt.Sprintf("notifications for queues %v", slices.Sorted(maps.Keys(missing)))))
	}
}

// startListening runs listen, one of s's Listen methods, on a goroutine of
// its own until the test ends, and then checks that it returned
// context.Canceled. The channel it returns gets the backend pid of each
// connection listen listens on, the first and every reconnection's.
func startListening(t *testing.T, s *Store, name string, listen func(ctx context.Context) error) <-chan uint32 {
	t.Helper()
	listening := make(chan uint32, 4)
	s.onListen = func(pid uint32) { listening <- pid }
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- listen(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := waitfor.Recv(t, done, name+" to return after its context was cancelled"); !errors.Is(err, context.Canceled) {
			t.Errorf("%s returned %v, want context.Canceled", name, err)
		}
	})
	return listening
}
