package completer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
		c.Add(completed(rows[i]), func(ok bool, err error) {
			applied[i] = ok && err == nil
			wg.Done()
		})
	}
	add(0)
	<-store.entered // the first write is in flight
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
	c.Add(completed(rows[0]), func(_ bool, err error) { done <- err })
	if err := <-done; err != nil {
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
	if c.Add(completed(rows[0]), func(bool, error) { t.Error("done called for a refused outcome") }) {
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
	c.Add(completed(rows[0]), func(_ bool, err error) { done <- err })
	<-store.entered
	abort()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("done err = %v, want the abort's context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the outcome was not reported failed after the abort")
	}
	c.Stop()
	if c.Add(completed(rows[0]), func(bool, error) {}) {
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
