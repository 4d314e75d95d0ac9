package twice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// hangingStore is the real store whose outcome writes and node removal,
// once armed, hang until their context ends or the test releases them, as
// a database that stopped answering would.
type hangingStore struct {
	twicestore.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed on the first hung call
	release chan struct{}
}

func newHangingStore(t *testing.T) *hangingStore {
	h := &hangingStore{Store: newStore(t), entered: make(chan struct{}), release: make(chan struct{})}
	return h
}

func (h *hangingStore) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = true
}

// hang blocks an armed call until ctx ends (false) or the release (true).
func (h *hangingStore) hang(ctx context.Context) bool {
	h.mu.Lock()
	armed := h.armed
	if armed {
		select {
		case <-h.entered:
		default:
			close(h.entered)
		}
	}
	h.mu.Unlock()
	if !armed {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-h.release:
		return true
	}
}

func (h *hangingStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	if !h.hang(ctx) {
		return nil, ctx.Err()
	}
	return h.Store.JobFinish(ctx, p)
}

func (h *hangingStore) NodeRemove(ctx context.Context, p *twicestore.NodeRemoveParams) error {
	if !h.hang(ctx) {
		return ctx.Err()
	}
	return h.Store.NodeRemove(ctx, p)
}

// startHanging starts a client on a hanging store with one job done and
// its outcome write hung.
func startHanging(t *testing.T) (*hangingStore, *twice.Client, int64) {
	t.Helper()
	store := newHangingStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.None})
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.arm()
	job := enqueuePing(t, c, nil)
	waitfor.Closed(t, store.entered, "the outcome write to hang")
	return store, c, job.ID
}

// TestStopReturnsWhenItsContextEnds: with a store whose writes hang, Stop
// returns ctx.Err() when its ctx ends instead of waiting for the outcome
// writes (it returned nil after 2 min 1 s before), and Stopped closes once
// the shutdown is over.
func TestStopReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	store, c, id := startHanging(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- c.Stop(ctx) }()
	if err := waitfor.Recv(t, stopped, "Stop to return"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want context.DeadlineExceeded", err)
	}
	t.Logf("Stop with a 100 ms ctx returned after %s while the store hung", time.Since(began).Round(time.Millisecond))
	select {
	case <-c.Stopped():
		t.Fatal("Stopped closed while an outcome write hangs")
	default:
	}
	close(store.release)
	waitfor.Closed(t, c.Stopped(), "the shutdown to end after the store answers")
	waitJob(t, store.Store, id, "completed", isState(twicetype.JobStateCompleted))
}

// TestConcurrentStopWaits: a second Stop while the first is shutting down
// waits for the same shutdown, bounded by its own ctx, instead of
// returning nil at once as it did.
func TestConcurrentStopWaits(t *testing.T) {
	t.Parallel()
	store, c, _ := startHanging(t)
	first := make(chan error, 1)
	go func() { first <- c.Stop(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Stop = %v, want context.DeadlineExceeded: it must wait for the shutdown", err)
	}
	close(store.release)
	if err := waitfor.Recv(t, first, "the first Stop to return"); err != nil {
		t.Errorf("first Stop = %v, want nil once the store answers", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("Stop after the shutdown = %v, want nil", err)
	}
}

// TestStopAbortsHungWrites: once Stop's ctx has ended, outcome writes that
// still hang are given up after the outcome write timeout, so the shutdown
// ends even if the store never answers.
func TestStopAbortsHungWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s outcome write timeout")
	}
	t.Parallel()
	store, c, id := startHanging(t)
	defer close(store.release)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want context.DeadlineExceeded", err)
	}
	waitfor.Closed(t, c.Stopped(), "the shutdown to give up the hung writes")
	row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateRunning {
		t.Errorf("state = %s, want running: the outcome was given up and the lease decides", row.State)
	}
}

// TestStopBeforeStart: Stop on a client that never started returns nil
// and closes Stopped; Start after it is refused.
func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	c, err := twice.NewClient(newStore(t), testConfig(twice.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, c.Stopped(), "Stopped after Stop")
	if err := c.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// TestShutdownPutsBackAfterGrace: Shutdown gives a running job its grace,
// cancels it with ErrShutdown when the grace ends, and returns nil once
// the job is back in its queue with its attempt unspent — the end of a
// grace is how a shutdown goes, not a failure (Stop returns
// DeadlineExceeded there).
func TestShutdownPutsBackAfterGrace(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, _ *twice.Job[pingArgs]) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}), &twice.KindOpts{Strategy: twice.None})
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	job := enqueuePing(t, c, nil)
	waitfor.Closed(t, started, "the handler to start")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Shutdown(ctx, 50*time.Millisecond); err != nil {
		t.Fatalf("Shutdown = %v, want nil once the job is put back", err)
	}
	if got := waitfor.Recv(t, cause, "the handler's cancellation"); !errors.Is(got, twice.ErrShutdown) {
		t.Errorf("handler cancelled with %v, want ErrShutdown", got)
	}
	row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateAvailable || row.Attempt != 0 {
		t.Errorf("job is %s at attempt %d, want available with its attempt refunded", row.State, row.Attempt)
	}
}
