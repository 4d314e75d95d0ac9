package twice_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// batchStore is a recordingStore that also records the fetches that were
// asked to peek and leased jobs.
type batchStore struct {
	recordingStore
}

func (s *batchStore) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err == nil && len(p.Peek) > 0 && len(res.Jobs) > 0 {
		s.log.add("fetch-peek")
	}
	return res, err
}

// peekStores are the stores the fetch-peek tests run on: SQLite, and
// PostgreSQL (where the peek is part of the fetch statement) when
// TWICE_TEST_POSTGRES is set.
func peekStores(_ *testing.T) map[string]func(t *testing.T) *batchStore {
	wrap := func(s twicestore.Store) *batchStore {
		return &batchStore{recordingStore: recordingStore{Store: s, log: &callLog{}}}
	}
	stores := map[string]func(t *testing.T) *batchStore{
		"sqlite": func(t *testing.T) *batchStore { return wrap(newStore(t)) },
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores["postgres"] = func(t *testing.T) *batchStore {
			u, _ := pgtest.Schema(t, "peek")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return wrap(s)
		}
	}
	return stores
}

// TestClaimAfterPeeksInTheFetch: a ClaimAfter job's peek comes with its
// fetch: an already processed job
// completes as a no-op without the handler and without a peek of its own;
// a new one runs once and claims; a redelivery in a row peeks again (the
// fetch's answer is taken once) and sees that claim.
func TestClaimAfterPeeksInTheFetch(t *testing.T) {
	t.Parallel()
	for name, open := range peekStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			var calls atomic.Int32
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(context.Context, *twice.Job[emailArgs]) error {
				calls.Add(1)
				return nil
			}), &twice.KindOpts{Strategy: twice.ClaimAfter})
			if _, err := store.Store.MarkerClaim(context.Background(), &twicestore.MarkerParams{Handler: emailHandler, Key: "done"}); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(reg)
			cfg.Redeliver = true
			client := startClient(t, store, cfg)

			res, err := client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "done"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
			if row.Note != "already processed" || calls.Load() != 0 {
				t.Errorf("processed job: note %q, handler called %d times; want a no-op without the handler", row.Note, calls.Load())
			}
			if log := store.log.get(); !slices.Contains(log, "fetch-peek") {
				t.Errorf("calls %v: want the fetch's peek", log)
			}

			res, err = client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "new"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
			if !markerProcessed(t, store.Store, emailHandler, "new") {
				t.Error("the new job's marker was not claimed")
			}
			// Each job's second delivery (Redeliver, in a row for ClaimAfter)
			// peeks again with MarkerPeek: the fetch's answer was taken once.
			// Stop waits for it to finish.
			waitLog(t, store.log, "peek", 2)
			if err := client.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("handler called %d times, want once: the new job's redelivery must see its claim", n)
			}
			if n := store.log.count("peek"); n != 2 {
				t.Errorf("%d MarkerPeeks, want 2 (one per redelivery; the first deliveries had the fetch's answers): %v", n, store.log.get())
			}
		})
	}
}

// waitLog polls the log until it holds n entries s, failing the test after
// a timeout.
func waitLog(t *testing.T, log *callLog, s string, n int) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("%d %q calls", n, s), func() bool { return log.count(s) >= n },
		func() string { return fmt.Sprint(log.get()) })
}

// droppingStore is a store wrapper written before fetch peeks: its
// JobFetch hands back the jobs without the answers.
type droppingStore struct{ *batchStore }

func (s droppingStore) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.batchStore.JobFetch(ctx, p)
	if err != nil {
		return nil, err
	}
	return &twicestore.JobFetchResult{Jobs: res.Jobs}, nil
}

// TestLostPeekAnswerPeeksAgain: a ClaimAfter job whose fetch answer was
// lost on the way peeks with MarkerPeek rather than run its handler: a
// lost answer is "not peeked", not "not processed". Before the answer came
// with the row, the missing answer read as false and the handler ran again
// for an already processed message.
func TestLostPeekAnswerPeeksAgain(t *testing.T) {
	t.Parallel()
	inner := peekStores(t)["sqlite"](t)
	store := droppingStore{inner}
	var calls atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(context.Context, *twice.Job[emailArgs]) error {
		calls.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	if _, err := inner.Store.MarkerClaim(context.Background(), &twicestore.MarkerParams{Handler: emailHandler, Key: "done"}); err != nil {
		t.Fatal(err)
	}
	client := startClient(t, store, testConfig(reg))
	res, err := client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "done"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, inner.Store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	if row.Note != "already processed" || calls.Load() != 0 {
		t.Errorf("note %q, handler called %d times; want a no-op without the handler", row.Note, calls.Load())
	}
	if n := inner.log.count("peek"); n != 1 {
		t.Errorf("%d MarkerPeeks, want 1: the job whose answer was lost peeks itself (calls %v)", n, inner.log.get())
	}
}

// listeningStore is a real store with an insert listener that reports
// being listened to and then waits for its context, as PostgreSQL's does;
// it is a wrapper too, so the SQLite store's fetch peeks are found under
// two wrappers.
type listeningStore struct {
	twicestore.Store
	listening       chan struct{}
	listeningCancel chan struct{}
}

func (s *listeningStore) ListenCancels(ctx context.Context, _ func(jobID int64)) error {
	close(s.listeningCancel)
	<-ctx.Done()
	return ctx.Err()
}

func (s *listeningStore) Unwrap() twicestore.Store { return s.Store }

func (s *listeningStore) ListenInserts(ctx context.Context, _ func(queue string)) error {
	close(s.listening)
	<-ctx.Done()
	return ctx.Err()
}

// unwrappingSpy embeds Store, so it has none of the optional capabilities
// of the store it wraps, but names that store with Unwrap. It records the
// peeks its fetches were asked for.
type unwrappingSpy struct {
	twicestore.Store
	mu     sync.Mutex
	peeked bool
}

func (s *unwrappingSpy) Unwrap() twicestore.Store { return s.Store }

func (s *unwrappingSpy) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	s.mu.Lock()
	s.peeked = s.peeked || len(p.Peek) > 0
	s.mu.Unlock()
	return s.Store.JobFetch(ctx, p)
}

// TestWrapperKeepsCapabilities: a store wrapper that embeds Store and
// offers Unwrap keeps the wrapped store's LISTEN (inserts and cancels),
// and its fetches are asked to peek. Before the Unwrap convention the
// runtime's type assertions failed on the wrapper, so it polled and
// peeked once per job.
func TestWrapperKeepsCapabilities(t *testing.T) {
	t.Parallel()
	base := &listeningStore{Store: newStore(t), listening: make(chan struct{}), listeningCancel: make(chan struct{})}
	spy := &unwrappingSpy{Store: base}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(context.Context, *twice.Job[emailArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.ClaimAfter})
	client := startClient(t, spy, testConfig(reg))
	waitfor.Closed(t, base.listening, "the wrapped store's ListenInserts to be called")
	waitfor.Closed(t, base.listeningCancel, "the wrapped store's ListenCancels to be called")
	res, err := client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, spy, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if !spy.peeked {
		t.Error("the fetch through the wrapper was not asked to peek")
	}
}
