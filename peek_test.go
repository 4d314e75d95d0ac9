package twice_test

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// batchStore is a recordingStore that also answers peeks in batches, so
// the runtime asks its fetches to peek; it records those peeks too.
type batchStore struct {
	recordingStore
	batch twicestore.MarkerBatchPeeker
}

func (s *batchStore) MarkerPeekMany(ctx context.Context, p *twicestore.MarkerPeekManyParams) (*twicestore.MarkerPeekManyResult, error) {
	s.log.add("peek-many")
	return s.batch.MarkerPeekMany(ctx, p)
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
func peekStores(t *testing.T) map[string]func(t *testing.T) *batchStore {
	wrap := func(s interface {
		twicestore.Store
		twicestore.MarkerBatchPeeker
	}) *batchStore {
		return &batchStore{recordingStore: recordingStore{Store: s, log: &callLog{}}, batch: s}
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

// TestClaimAfterPeeksInTheFetch: on a store that peeks in batches, a
// ClaimAfter job's peek comes with its fetch: an already processed job
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
			twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(ctx context.Context, job *twice.Job[emailArgs]) error {
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
			log := store.log.get()
			if slices.Contains(log, "peek") || !slices.Contains(log, "fetch-peek") {
				t.Errorf("calls %v: want the fetch's peek and no MarkerPeek", log)
			}

			res, err = client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: "new"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
			if !markerProcessed(t, store, emailHandler, "new") {
				t.Error("the new job's marker was not claimed")
			}
			// Each job's second delivery (Redeliver, in a row for ClaimAfter)
			// peeks again, in a batch: the fetch's answer was taken once.
			// Stop waits for it to finish.
			waitLog(t, store.log, "peek-many", 2)
			if err := client.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("handler called %d times, want once: the new job's redelivery must see its claim", n)
			}
		})
	}
}

// waitLog polls the log until it holds n entries s, failing the test after
// a timeout.
func waitLog(t *testing.T, log *callLog, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for log.count(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %q calls, want %d; calls: %v", log.count(s), s, n, log.get())
		}
		<-tick.C
	}
}
