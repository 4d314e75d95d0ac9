package twice_test

import (
	"context"
	"errors"
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

// TestKindTimeout: KindOpts.Timeout ends an attempt's context with a cause
// naming the timeout; the attempt fails and is retried.
func TestKindTimeout(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := twice.NewRegistry()
	causes := make(chan error, 1)
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, job *twice.Job[pingArgs]) error {
		if job.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}), &twice.KindOpts{Strategy: twice.None, Timeout: 50 * time.Millisecond})
	c := startClient(t, store, testConfig(reg))
	job := enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 3})
	if cause := waitfor.Recv(t, causes, "the attempt to time out"); cause == nil || !strings.Contains(cause.Error(), "exceeded its 50ms timeout") {
		t.Errorf("cause = %v, want the kind's timeout named", cause)
	}
	row := waitJob(t, store, job.ID, "completed", isState(twicetype.JobStateCompleted))
	if row.Attempt != 2 || len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "50ms timeout") {
		t.Errorf("attempt %d errors %v; want the timed-out attempt recorded and a second one", row.Attempt, row.Errors)
	}
}

// switchingStore switches the ping kind off in the store right after the
// first fetch that leases a ping job, and hands the job over only once the
// worker has applied the switch: three reads later. The first may have
// begun before the flip; the second began after it, but its signal comes
// before the loop applies what it read; the loop reads again only after
// applying, so the third read's signal means the second's result is in.
type switchingStore struct {
	twicestore.Store
	mu      sync.Mutex
	flipped bool
	read    chan struct{} // a signal per ToggleList after the flip
}

func (s *switchingStore) ToggleList(ctx context.Context, p *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	res, err := s.Store.ToggleList(ctx, p)
	s.mu.Lock()
	flipped := s.flipped
	s.mu.Unlock()
	if flipped {
		select {
		case s.read <- struct{}{}:
		default:
		}
	}
	return res, err
}

func (s *switchingStore) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err != nil || len(res.Jobs) == 0 {
		return res, err
	}
	s.mu.Lock()
	first := !s.flipped
	s.flipped = true
	s.mu.Unlock()
	if !first {
		return res, nil
	}
	if err := s.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
		Kind: "test.ping.v1", Enabled: false, Reason: "test", By: "test", At: time.Now(),
	}}); err != nil {
		return nil, err
	}
	for range 3 {
		select {
		case <-s.read:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return res, nil
}

// TestSwitchCheckedBeforeAttempt: a kind switched off between the fetch
// and the attempt is caught by the check just before the attempt: the job
// goes back to its queue with its attempt unspent, the handler never runs.
func TestSwitchCheckedBeforeAttempt(t *testing.T) {
	t.Parallel()
	store := &switchingStore{Store: newStore(t), read: make(chan struct{}, 1)}
	var calls atomic.Int32
	events := newEventLog()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error {
		calls.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.TogglePollInterval = 10 * time.Millisecond
	cfg.Observer = events
	c := startClient(t, store, cfg)
	job := enqueuePing(t, c, nil)
	events.await(t, "test.ping.v1", twice.EventEnqueued, twice.EventSkipped)
	row := waitJob(t, store, job.ID, "held", func(r *twicetype.JobRow) bool { return r.State == twicetype.JobStateAvailable })
	if row.Attempt != 0 || row.Note != "held: kill switch off" || calls.Load() != 0 {
		t.Errorf("attempt %d note %q calls %d; want held with the attempt unspent and no call", row.Attempt, row.Note, calls.Load())
	}
}

// failingMarkers is a recording store whose MarkerRelease always fails
// and whose MarkerPeek fails the first time. Its fetches bring no peek
// answers, so each ClaimAfter job peeks with MarkerPeek.
type failingMarkers struct {
	*recordingStore
	peekFailed atomic.Bool
}

func (s *failingMarkers) MarkerRelease(context.Context, *twicestore.MarkerParams) error {
	s.log.add("release")
	return errors.New("injected release failure")
}

func (s *failingMarkers) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p) // the inner store's, past recordingStore's
	if err == nil {
		res.Processed = nil
	}
	return res, err
}

func (s *failingMarkers) MarkerPeek(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	if s.peekFailed.CompareAndSwap(false, true) {
		s.log.add("peek-failed")
		return nil, errors.New("injected peek failure")
	}
	return s.recordingStore.MarkerPeek(ctx, p)
}

func startFailingMarkers(t *testing.T, strategy twice.Strategy, handler func(context.Context, *twice.Job[emailArgs]) error) (*failingMarkers, *twice.Client) {
	t.Helper()
	store := &failingMarkers{recordingStore: &recordingStore{Store: newStore(t), log: &callLog{}}}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](handler), &twice.KindOpts{Strategy: strategy})
	return store, startClient(t, store, testConfig(reg))
}

// TestClaimBeforeReleaseFails: when a NotApplied failure's claim cannot
// be released, the job is dead-lettered (a kept claim would turn the retry
// into a silent no-op, a loss) and the error says why.
func TestClaimBeforeReleaseFails(t *testing.T) {
	t.Parallel()
	store, c := startFailingMarkers(t, twice.ClaimBefore, func(context.Context, *twice.Job[emailArgs]) error {
		return twice.NotApplied(errors.New("provider refused"))
	})
	res, err := c.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "k"}, &twice.EnqueueOpts{MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
	if row.Attempt != 1 || len(row.Errors) != 1 ||
		!strings.Contains(row.Errors[0].Error, "release claim after not applied: provider refused: injected release failure") {
		t.Errorf("attempt %d errors %v; want dead at once with the failed release named", row.Attempt, row.Errors)
	}
	if !markerProcessed(t, store.Store, emailHandler, "k") {
		t.Error("the claim is gone, though its release failed")
	}
}

// TestClaimAfterPeekFails: an attempt whose peek fails does not run the
// handler; it fails and is retried, and the retry peeks and runs once.
func TestClaimAfterPeekFails(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	store, c := startFailingMarkers(t, twice.ClaimAfter, func(context.Context, *twice.Job[emailArgs]) error {
		calls.Add(1)
		return nil
	})
	res, err := c.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "k"}, &twice.EnqueueOpts{MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	if row.Attempt != 2 || len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "peek marker: injected peek failure") {
		t.Errorf("attempt %d errors %v; want the failed peek recorded and a second attempt", row.Attempt, row.Errors)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want once: never without a peek", n)
	}
}
