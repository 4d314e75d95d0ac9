package twice_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// flakyOutputStore fails its next fails reads of a job's output, as
// every query fails while PostgreSQL restarts (SQLSTATE 57P01), then
// reads through.
type flakyOutputStore struct {
	twicestore.Store
	fails atomic.Int64
}

func (s *flakyOutputStore) Unwrap() twicestore.Store { return s.Store }

var errRestarting = errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")

func (s *flakyOutputStore) JobOutput(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, errRestarting
	}
	return s.Store.JobOutput(ctx, p)
}

// flakyFinishStore is flakyOutputStore over a store that notifies
// finishes (PostgreSQL): the first read of a notified Wait (JobAwait)
// fails as well.
type flakyFinishStore struct {
	*flakyOutputStore
	l twicestore.FinishListener
}

func (s *flakyFinishStore) JobAwait(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, errRestarting
	}
	return s.l.JobAwait(ctx, p)
}

func (s *flakyFinishStore) ListenFinished(ctx context.Context, notify func(int64), listening func()) error {
	return s.l.ListenFinished(ctx, notify, listening)
}

// flaky wraps store in the flaky store of its kind, and returns the
// count of reads left to fail.
func flaky(store twicestore.Store) (twicestore.Store, *atomic.Int64) {
	s := &flakyOutputStore{Store: store}
	if l, ok := twicestore.As[twicestore.FinishListener](store); ok {
		return &flakyFinishStore{flakyOutputStore: s, l: l}, &s.fails
	}
	return s, &s.fails
}

// TestWaitRetriesFailedReads: Wait outlives reads that fail (a database
// restart) and returns the job's result once it can read it again; only
// its ctx ends it.
func TestWaitRetriesFailedReads(t *testing.T) {
	t.Parallel()
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			store, fails := flaky(open(t))
			release := make(chan struct{})
			reg := twice.NewRegistry()
			twice.MustRegister(reg, sumHandler(release), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 1})
			client := startClient(t, store, testConfig(reg))
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Timeout)
			defer cancel()

			res, err := client.Enqueue(ctx, sumArgs{A: 2, B: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitJob(t, store, res.Job.ID, "running", isState(twicetype.JobStateRunning))
			fails.Store(3)
			close(release)
			r, err := client.Wait(ctx, res.Job.ID)
			var got sumResult
			if err == nil {
				err = r.Decode(&got)
			}
			if err != nil || got.Sum != 5 {
				t.Fatalf("Wait through 3 failed reads = %+v, %v; want sum 5", r, err)
			}
			if n := fails.Load(); n > 0 {
				t.Fatalf("%d failed reads left: Wait did not read through them", n)
			}
		})
	}
}

// TestEnqueueAndWaitReturnsID: an EnqueueAndWait whose ctx ends while its
// reads fail returns the id of the job it enqueued, with the ctx's error,
// so a caller waits for that job again instead of enqueuing another.
func TestEnqueueAndWaitReturnsID(t *testing.T) {
	t.Parallel()
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			store, fails := flaky(open(t))
			fails.Store(1 << 40)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, sumHandler(nil), &twice.KindOpts{Strategy: twice.None})
			client := startClient(t, store, testConfig(reg))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			type result struct {
				r   *twice.JobOutput
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := client.EnqueueAndWait(ctx, sumArgs{A: 1, B: 1}, &twice.EnqueueOpts{RunAt: time.Now().Add(time.Hour)})
				done <- result{r, err}
			}()
			waitfor.Cond(t, "the job to be enqueued and a read to fail", func() bool {
				return fails.Load() < 1<<40
			}, nil)
			cancel()
			got := waitfor.Recv(t, done, "EnqueueAndWait to return")
			if !errors.Is(got.err, context.Canceled) || got.r == nil || got.r.ID == 0 {
				t.Fatalf("EnqueueAndWait with its ctx cancelled = %+v, %v; want the job's id and context.Canceled", got.r, got.err)
			}
			row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: got.r.ID})
			if err != nil || row.Kind != (sumArgs{}).Kind() || row.State != twicetype.JobStateAvailable {
				t.Fatalf("job %d = %+v, %v; want the enqueued job, waiting", got.r.ID, row, err)
			}
		})
	}
}
