package twice_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
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
	deadline := time.After(20 * time.Second)
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
	// The same credit again: the marker absorbs it.
	if _, err := c.Enqueue(ctx, creditArgs{CreditID: 1, Cents: 5}, nil); err != nil {
		t.Fatal(err)
	}
	events.await(t, credit, twice.EventEnqueued, twice.EventStarted, twice.EventDuplicate)

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
