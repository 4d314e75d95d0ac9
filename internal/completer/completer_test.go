package completer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gatedStore is the real store whose JobFinish records batch sizes, can be
// held at a gate, and can fail a number of times first.
type gatedStore struct {
	twicestore.Store
	mu      sync.Mutex
	batches []int
	gate    chan struct{} // when set, the first JobFinish waits for it
	entered chan struct{}
	failN   int
}

func (s *gatedStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	s.mu.Lock()
	gate := s.gate
	s.gate = nil
	fail := s.failN > 0
	if fail {
		s.failN--
	}
	s.batches = append(s.batches, len(p.Outcomes))
	s.mu.Unlock()
	if gate != nil {
		close(s.entered)
		<-gate
	}
	if fail {
		return nil, errors.New("injected write failure")
	}
	return s.Store.JobFinish(ctx, p)
}

func setup(t *testing.T, jobs int) (*gatedStore, []*twicetype.JobRow) {
	t.Helper()
	ctx := context.Background()
	s, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	params := make([]*twicestore.JobInsertParams, jobs)
	for i := range params {
		params[i] = &twicestore.JobInsertParams{Kind: "test.job.v1", Queue: "default", MessageID: "m", Key: "k", MaxAttempts: 3}
	}
	if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"test.job.v1"}, Limit: jobs,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedStore{Store: s}, res.Jobs
}

func completed(row *twicetype.JobRow) *twicestore.JobOutcome {
	return &twicestore.JobOutcome{ID: row.ID, Epoch: row.Epoch, State: twicetype.JobStateCompleted, FinishedAt: time.Now()}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Outcomes that arrive while a write is in flight go out together in the
// next write.
func TestBatchesWhatArrivesDuringAWrite(t *testing.T) {
	t.Parallel()
	store, rows := setup(t, 11)
	store.gate, store.entered = make(chan struct{}), make(chan struct{})
	gate := store.gate
	c := New(store, discard(), 100)
	c.Start(context.Background())
	var wg sync.WaitGroup
	applied := make([]bool, len(rows))
	add := func(i int) {
		wg.Add(1)
		c.Add(completed(rows[i]), nil, func(ok bool, err error) {
			applied[i] = ok && err == nil
			wg.Done()
		})
	}
	add(0)
	waitfor.Closed(t, store.entered, "the first write to be in flight")
	for i := 1; i < len(rows); i++ {
		add(i)
	}
	close(gate)
	wg.Wait()
	c.Stop()
	if len(store.batches) != 2 || store.batches[0] != 1 || store.batches[1] != 10 {
		t.Errorf("batches = %v, want [1 10]", store.batches)
	}
	for i, ok := range applied {
		if !ok {
			t.Errorf("outcome %d not applied", i)
		}
	}
}

func TestRetriesAFailedWrite(t *testing.T) {
	t.Parallel()
	store, rows := setup(t, 1)
	store.failN = 2
	c := New(store, discard(), 10)
	c.Start(context.Background())
	done := make(chan error, 1)
	c.Add(completed(rows[0]), nil, func(_ bool, err error) { done <- err })
	if err := waitfor.Recv(t, done, "the outcome to be written after retries"); err != nil {
		t.Fatalf("outcome not written after retries: %v", err)
	}
	c.Stop()
	row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: rows[0].ID})
	if err != nil || row.State != twicetype.JobStateCompleted {
		t.Fatalf("job state = %v (%v), want completed", row.State, err)
	}
}

func TestAddAfterStopIsRefused(t *testing.T) {
	t.Parallel()
	store, rows := setup(t, 1)
	c := New(store, discard(), 10)
	c.Start(context.Background())
	c.Stop()
	if c.Add(completed(rows[0]), nil, func(bool, error) { t.Error("done called for a refused outcome") }) {
		t.Fatal("Add after Stop accepted an outcome")
	}
}

// TestAbortEndsTheRetries: a store whose writes hang does not hold the
// completer past its abort: the write in flight ends, no retry waits, the
// outcome is reported failed with the abort's error, and Stop returns.
func TestAbortEndsTheRetries(t *testing.T) {
	t.Parallel()
	store, rows := setup(t, 1)
	store.gate, store.entered = make(chan struct{}), make(chan struct{})
	defer close(store.gate)
	hang := &hangingFinish{gatedStore: store}
	ctx, abort := context.WithCancel(context.Background())
	c := New(hang, discard(), 10)
	c.Start(ctx)
	done := make(chan error, 1)
	c.Add(completed(rows[0]), nil, func(_ bool, err error) { done <- err })
	waitfor.Closed(t, store.entered, "the write to be in flight")
	abort()
	if err := waitfor.Recv(t, done, "the outcome to be reported failed after the abort"); !errors.Is(err, context.Canceled) {
		t.Errorf("done err = %v, want the abort's context.Canceled", err)
	}
	c.Stop()
	if c.Add(completed(rows[0]), nil, func(bool, error) {}) {
		t.Error("Add after the abort accepted an outcome")
	}
	if n := len(store.batches); n != 1 {
		t.Errorf("%d writes, want 1: no retry after the abort", n)
	}
}

// hangingFinish holds JobFinish until its context ends, as a store that
// stopped answering would until the caller gives up.
type hangingFinish struct{ *gatedStore }

func (h *hangingFinish) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	h.mu.Lock()
	h.batches = append(h.batches, len(p.Outcomes))
	h.mu.Unlock()
	close(h.entered)
	<-ctx.Done()
	return nil, ctx.Err()
}

// outageStore is the real store whose JobFinish fails until down ends, as
// PostgreSQL does while its primary fails over.
type outageStore struct {
	twicestore.Store
	down   time.Time
	mu     sync.Mutex
	writes int
}

func (s *outageStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	if time.Now().Before(s.down) {
		return nil, errors.New("injected outage: connection refused")
	}
	return s.Store.JobFinish(ctx, p)
}

// TestOutcomesOutlastAnOutage: while the store refuses writes for 3 s, an
// outcome whose lease holds a minute is retried (with a capped backoff)
// and written once the store is back; an outcome whose lease ends within
// the outage is given up, with the store's error, before the outage ends,
// and its job stays running for the rescuer. Before, every outcome was
// given up after four tries in 1.2 s, and its job ran again.
func TestOutcomesOutlastAnOutage(t *testing.T) {
	t.Parallel()
	const outage = 3 * time.Second
	tests := []struct {
		name      string
		lease     time.Duration
		wantState twicetype.JobState
	}{
		{"lease outlasts the outage", time.Minute, twicetype.JobStateCompleted},
		{"lease ends during the outage", time.Second, twicetype.JobStateRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gated, rows := setup(t, 1)
			start := time.Now()
			store := &outageStore{Store: gated.Store, down: start.Add(outage)}
			c := New(store, discard(), 10)
			c.Start(context.Background())
			defer c.Stop()
			type result struct {
				applied bool
				err     error
				at      time.Time
			}
			done := make(chan result, 1)
			leaseUntil := start.Add(tt.lease)
			c.Add(completed(rows[0]), func() time.Time { return leaseUntil }, func(applied bool, err error) {
				done <- result{applied, err, time.Now()}
			})
			r := waitfor.RecvWithin(t, 30*time.Second, done, "the outcome to be written or given up")
			row, err := gated.JobGet(context.Background(), &twicestore.JobGetParams{ID: rows[0].ID})
			if err != nil {
				t.Fatal(err)
			}
			if row.State != tt.wantState {
				t.Errorf("job state = %s, want %s", row.State, tt.wantState)
			}
			switch tt.wantState {
			case twicetype.JobStateCompleted:
				if !r.applied || r.err != nil {
					t.Errorf("done(%v, %v), want the outcome applied", r.applied, r.err)
				}
				if r.at.Before(store.down) {
					t.Errorf("written at %s, before the outage ended", r.at.Sub(start))
				}
			default:
				if r.applied || r.err == nil {
					t.Errorf("done(%v, %v), want the outage's error", r.applied, r.err)
				}
				if !r.at.Before(store.down) {
					t.Errorf("given up at %s, after the outage: it should stop when the lease ends", r.at.Sub(start))
				}
			}
		})
	}
}

// poisonStore is the real store whose JobFinish refuses, as unstorable,
// every write holding an outcome it finds poisoned, as PostgreSQL refuses
// text with a NUL byte (SQLSTATE 22021) on every try.
type poisonStore struct {
	twicestore.Store
	poisoned func(o *twicestore.JobOutcome) bool
	mu       sync.Mutex
	writes   [][]int64 // the job ids of each write, in order
}

func (s *poisonStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	ids := make([]int64, len(p.Outcomes))
	poisoned := false
	for i, o := range p.Outcomes {
		ids[i] = o.ID
		poisoned = poisoned || s.poisoned(o)
	}
	s.mu.Lock()
	s.writes = append(s.writes, ids)
	s.mu.Unlock()
	if poisoned {
		return nil, fmt.Errorf("finish jobs: %w",
			twicestore.Unstorable(errors.New(`injected: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`)))
	}
	return s.Store.JobFinish(ctx, p)
}

// TestUnstorableOutcomeIsIsolated: one outcome the store can never store,
// in a batch of 51 whose leases hold an hour, does not hold up the other
// 50: they are written at once, without a retry (the batch is halved
// around the bad one), and the bad one is dead-lettered with an error
// saying why, instead of being retried until its lease ends (for ever,
// while the heartbeat extended it). Before, the whole batch was retried
// while the leases held, and no outcome of it was written.
func TestUnstorableOutcomeIsIsolated(t *testing.T) {
	t.Parallel()
	gated, all := setup(t, 52)
	holder, rows := all[0], all[1:]
	store := &poisonStore{Store: gated.Store, poisoned: func(o *twicestore.JobOutcome) bool { return o.Note == "poison" }}
	gate, entered := make(chan struct{}), make(chan struct{})
	first := &firstWriteGate{Store: store, gate: gate, entered: entered}
	c := New(first, discard(), 100)
	c.Start(context.Background())
	defer c.Stop()
	bad := rows[17].ID
	leaseUntil := func() time.Time { return time.Now().Add(time.Hour) }
	type result struct {
		id      int64
		applied bool
		err     error
		state   twicetype.JobState
	}
	results := make(chan result, len(rows)+1)
	add := func(o *twicestore.JobOutcome) {
		c.Add(o, leaseUntil, func(applied bool, err error) { results <- result{o.ID, applied, err, o.State} })
	}
	// A write of another job first holds the loop, so the 51 go together.
	add(completed(holder))
	waitfor.Closed(t, entered, "the first write to be in flight")
	for _, row := range rows {
		o := completed(row)
		if row.ID == bad {
			o.Note = "poison"
		}
		add(o)
	}
	close(gate)
	for range len(rows) + 1 {
		r := waitfor.Recv(t, results, "every outcome to be written or given up")
		switch {
		case r.id == bad && (!r.applied || r.err != nil || r.state != twicetype.JobStateDead):
			t.Errorf("bad outcome: done(%v, %v) with state %s; want its dead-letter applied", r.applied, r.err, r.state)
		case r.id != bad && r.id != holder.ID && (!r.applied || r.err != nil):
			t.Errorf("job %d: done(%v, %v); want it written", r.id, r.applied, r.err)
		}
	}
	ctx := context.Background()
	for _, row := range rows {
		got, err := gated.JobGet(ctx, &twicestore.JobGetParams{ID: row.ID})
		if err != nil {
			t.Fatal(err)
		}
		want := twicetype.JobStateCompleted
		if row.ID == bad {
			want = twicetype.JobStateDead
			if len(got.Errors) != 1 || !strings.Contains(got.Errors[0].Error, "could not be stored") ||
				!strings.Contains(got.Errors[0].Error, "SQLSTATE 22021") {
				t.Errorf("bad job's errors %v, want the refusal explained", got.Errors)
			}
		}
		if got.State != want {
			t.Errorf("job %d is %s, want %s", row.ID, got.State, want)
		}
	}
	// The holder's write, then halving 51 around one bad outcome: the
	// whole, 2 writes per level (6 levels) and the dead-letter; a retry
	// would repeat a write.
	store.mu.Lock()
	defer store.mu.Unlock()
	if n := len(store.writes); n > 15 {
		t.Errorf("%d writes, want at most 15 (halving, no retries)", n)
	}
	seen := map[string]bool{}
	for _, ids := range store.writes {
		k := fmt.Sprint(ids)
		if seen[k] && len(ids) > 1 {
			t.Errorf("the write of %v was retried", ids)
		}
		seen[k] = true
	}
}

// TestUnstorableFallbackWithoutMarker: when the dead-letter that replaces
// an unstorable outcome is refused too (its marker was the bad value), it
// is written without the marker.
func TestUnstorableFallbackWithoutMarker(t *testing.T) {
	t.Parallel()
	gated, rows := setup(t, 1)
	store := &poisonStore{Store: gated.Store, poisoned: func(o *twicestore.JobOutcome) bool { return o.Marker != nil }}
	c := New(store, discard(), 10)
	c.Start(context.Background())
	defer c.Stop()
	o := completed(rows[0])
	o.Marker = &twicestore.MarkerParams{Handler: "h", Key: "bad\x00key"}
	done := make(chan error, 1)
	c.Add(o, func() time.Time { return time.Now().Add(time.Hour) }, func(applied bool, err error) {
		if !applied && err == nil {
			err = errors.New("not applied")
		}
		done <- err
	})
	if err := waitfor.Recv(t, done, "the dead-letter to be written"); err != nil {
		t.Fatalf("done: %v", err)
	}
	got, err := gated.JobGet(context.Background(), &twicestore.JobGetParams{ID: rows[0].ID})
	if err != nil || got.State != twicetype.JobStateDead || o.State != twicetype.JobStateDead || o.Marker != nil {
		t.Fatalf("job = %v (%v), outcome written %+v; want dead, without the marker", got.State, err, o)
	}
}

// firstWriteGate holds the first JobFinish at gate.
type firstWriteGate struct {
	twicestore.Store
	once    sync.Once
	gate    chan struct{}
	entered chan struct{}
}

func (g *firstWriteGate) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.gate
	}
	return g.Store.JobFinish(ctx, p)
}
