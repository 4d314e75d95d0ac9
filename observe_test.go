package twice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// eventLog is an Observer that keeps every event.
type eventLog struct {
	mu     sync.Mutex
	events []twice.Event
	seen   chan struct{} // holds a signal after every event; never blocks Observe
}

func newEventLog() *eventLog { return &eventLog{seen: make(chan struct{}, 1)} }

func (l *eventLog) Observe(e twice.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default: // a signal is pending already
	}
}

// of returns the types of the events of kind, in order.
func (l *eventLog) of(kind string) []twice.EventType {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []twice.EventType
	for _, e := range l.events {
		if e.Kind == kind {
			out = append(out, e.Type)
		}
	}
	return out
}

// await waits until kind's events end with want.
func (l *eventLog) await(t *testing.T, kind string, want ...twice.EventType) {
	t.Helper()
	deadline := time.After(waitfor.Timeout)
	for {
		if got := l.of(kind); len(got) >= len(want) && slices.Equal(got[len(got)-len(want):], want) {
			return
		}
		select {
		case <-l.seen:
		case <-deadline:
			t.Fatalf("events of %s = %v, want them to end with %v", kind, l.of(kind), want)
		}
	}
}

func (l *eventLog) find(kind string, typ twice.EventType) twice.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Kind == kind && e.Type == typ {
			return e
		}
	}
	return twice.Event{}
}

func TestObserverSeesEveryOutcome(t *testing.T) {
	t.Parallel()
	began := time.Now()
	store := newStore(t)
	setupLedger(t, store)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, creditHandler(nil), &twice.KindOpts{Strategy: twice.Transactional})
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, j *twice.Job[pingArgs]) error {
		if j.Args.N < 0 {
			return errors.New("negative ping")
		}
		return nil
	}), &twice.KindOpts{MaxAttempts: 2, Queue: twice.QueueBulk})
	events := newEventLog()
	cfg := testConfig(reg)
	cfg.Observer = events
	c := startClient(t, store, cfg)
	ctx := t.Context()
	credit, ping := creditArgs{}.Kind(), pingArgs{}.Kind()

	// Transactional: its completion commits in the strategy's transaction.
	if _, err := c.Enqueue(ctx, creditArgs{CreditID: 1, Cents: 5}, nil); err != nil {
		t.Fatal(err)
	}
	events.await(t, credit, twice.EventEnqueued, twice.EventStarted, twice.EventCompleted)
	// The same credit again: the marker absorbs it, and the no-op
	// completes (awaiting the sequence to end at the duplicate raced with
	// the completion that follows it).
	if _, err := c.Enqueue(ctx, creditArgs{CreditID: 1, Cents: 5}, nil); err != nil {
		t.Fatal(err)
	}
	events.await(t, credit, twice.EventEnqueued, twice.EventStarted, twice.EventDuplicate, twice.EventCompleted)

	// A failure retried, then dead.
	res, err := c.Enqueue(ctx, pingArgs{N: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
	events.await(t, ping, twice.EventEnqueued, twice.EventStarted, twice.EventRetried, twice.EventStarted, twice.EventDead)

	started := events.find(ping, twice.EventStarted)
	if !started.FirstStart || started.Queue != twice.QueueBulk || started.Wait < 0 {
		t.Errorf("first start event = %+v, want FirstStart in queue bulk", started)
	}
	if dead := events.find(ping, twice.EventDead); dead.Run <= 0 {
		t.Errorf("dead event = %+v, want the attempt's run time", dead)
	}
	// Every attempt's start, the retry's too, says how long it took from
	// the fetch that leased it: more than nothing, less than the test.
	events.mu.Lock()
	defer events.mu.Unlock()
	for _, e := range events.events {
		if e.Type == twice.EventStarted && (e.SinceFetch <= 0 || e.SinceFetch > time.Since(began)) {
			t.Errorf("start event %+v: SinceFetch %s, want in (0, %s]", e, e.SinceFetch, time.Since(began))
		}
	}
}

func TestObserverSeesSkippedTicks(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, noop[creditArgs](), &twice.KindOpts{Strategy: twice.None, FailClosed: true, Queue: twice.QueueCritical})
	reg.MustSchedule("credit-sweep", "@every 1s", creditArgs{CreditID: 1, Cents: 1}, nil)
	events := newEventLog()
	cfg := testConfig(reg)
	cfg.Observer = events
	startClient(t, store, cfg)
	events.await(t, creditArgs{}.Kind(), twice.EventSkipped)
	if e := events.find(creditArgs{}.Kind(), twice.EventSkipped); e.Queue != twice.QueueCritical {
		t.Errorf("skipped tick event = %+v, want the kind's queue", e)
	}
}

func TestObserverSeesEnqueuedTicks(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, noop[pingArgs](), nil)
	reg.MustSchedule("ping", "@every 1s", pingArgs{N: 1}, nil)
	events := newEventLog()
	cfg := testConfig(reg)
	cfg.Observer = events
	startClient(t, store, cfg)
	events.await(t, pingArgs{}.Kind(), twice.EventEnqueued, twice.EventStarted, twice.EventCompleted)
}

// TestObserverCountsEveryAbsorbedDelivery: in redelivery mode every
// delivery the marker absorbs is an EventDuplicate: a message already
// processed before it was enqueued is absorbed twice (both deliveries), a
// new one once (its redelivery). Before, only the duplicate recorded with
// the outcome counted, so redeliveries in a row counted none.
func TestObserverCountsEveryAbsorbedDelivery(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	if _, err := store.MarkerClaim(context.Background(), &twicestore.MarkerParams{Handler: emailHandler, Key: "old"}); err != nil {
		t.Fatal(err)
	}
	events := newEventLog()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(context.Context, *twice.Job[emailArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.ClaimAfter})
	cfg := testConfig(reg)
	cfg.Redeliver = true
	cfg.Observer = events
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, key := range []string{"old", "new-1", "new-2", "new-3"} {
		res, err := c.Enqueue(context.Background(), emailArgs{UserID: int64(i), Key: key}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	for _, id := range ids {
		waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
	}
	if err := c.Stop(context.Background()); err != nil { // waits for the redeliveries
		t.Fatal(err)
	}
	dups := 0
	for _, e := range events.of(emailHandler) {
		if e == twice.EventDuplicate {
			dups++
		}
	}
	if dups != 5 {
		t.Errorf("%d duplicates observed, want 5 (2 for the processed message, 1 per new one's redelivery)", dups)
	}
}

// TestStaleHolderLogsItsLostLease: an attempt that ends after its lease was
// lost is logged as such, not as "job failed; will retry": its outcome is
// refused (the Observer is told EventFenced), and the new holder decides
// what becomes of the job.
func TestStaleHolderLogsItsLostLease(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	var fenced atomic.Int32
	returned := make(chan struct{})
	store, c := setupPing(t, func(c *twice.Config) {
		c.LeaseDuration = time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Observer = twice.ObserverFunc(func(e twice.Event) {
			if e.Type == twice.EventFenced {
				fenced.Add(1)
			}
		})
	}, func(ctx context.Context, job *twice.Job[pingArgs]) error {
		if job.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		defer close(returned)
		return ctx.Err()
	})
	job := enqueuePing(t, c, nil)
	waitJob(t, store, job.ID, "running", isState(twicetype.JobStateRunning))
	if _, err := store.JobRescue(context.Background(), &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, returned, "the stale handler to return")
	waitJob(t, store, job.ID, "completed", isState(twicetype.JobStateCompleted))
	waitfor.Cond(t, "the lost lease logged", func() bool {
		return strings.Contains(logs.String(), "job attempt ended after its lease was lost")
	}, logs.String)
	if strings.Contains(logs.String(), "job failed; will retry") {
		t.Errorf("the stale attempt was logged as a failure to retry:\n%s", logs.String())
	}
	waitfor.Cond(t, "one fenced outcome observed", func() bool { return fenced.Load() == 1 },
		func() string { return fmt.Sprint(fenced.Load(), " fenced") })
}
