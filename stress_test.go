package twice_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// completionCounter wraps a real store and counts, per job, the completions
// that were actually written: by the completer, or inside a committed
// Transactional transaction.
type completionCounter struct {
	twicestore.Store
	mu     *sync.Mutex
	counts map[int64]int
}

func (s *completionCounter) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	res, err := s.Store.JobFinish(ctx, p)
	if err == nil {
		s.record(p.Outcomes, res.Applied)
	}
	return res, err
}

func (s *completionCounter) record(outcomes []*twicestore.JobOutcome, applied []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, o := range outcomes {
		if applied[i] && o.State == twicetype.JobStateCompleted {
			s.counts[o.ID]++
		}
	}
}

func (s *completionCounter) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, counter: s}, nil
}

type countingTx struct {
	twicestore.Tx
	counter  *completionCounter
	outcomes []*twicestore.JobOutcome
	applied  []bool
}

func (tx *countingTx) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	res, err := tx.Tx.JobFinish(ctx, p)
	if err == nil {
		tx.outcomes = append(tx.outcomes, p.Outcomes...)
		tx.applied = append(tx.applied, res.Applied...)
	}
	return res, err
}

func (tx *countingTx) Commit(ctx context.Context) error {
	if err := tx.Tx.Commit(ctx); err != nil {
		return err
	}
	tx.counter.record(tx.outcomes, tx.applied)
	return nil
}

// TestStressEightWorkersOneFile: eight workers, each with its own
// connection pool on one SQLite file (as eight processes would have), work
// 10,000 Transactional jobs, every one delivered twice on purpose. The store
// must end with every job completed exactly once and every effect applied
// exactly once.
func TestStressEightWorkersOneFile(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test skipped in -short mode")
	}
	t.Parallel()
	const workers = 8
	// 10,000 jobs take about 3 minutes without -race on the project's
	// 2-core machine and past 20 under it (modernc.org/sqlite's writer
	// contention among eight workers is the cost): 2,000 under -race.
	jobs := int64(10_000)
	if raceDetector {
		jobs = 2_000
	}
	path := migratedPath(t)
	setup := openStore(t, path)
	setupLedger(t, setup)
	ctx := context.Background()

	producer, err := twice.NewClient(setup, testConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]twice.EnqueueParams, 0, 1000)
	for i := int64(1); i <= jobs; i++ {
		batch = append(batch, twice.EnqueueParams{Args: creditArgs{CreditID: i, Cents: 1}})
		if len(batch) == cap(batch) {
			if _, err := producer.EnqueueMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}

	var mu sync.Mutex
	counts := map[int64]int{}
	for range workers {
		reg := twice.NewRegistry()
		twice.MustRegister(reg, creditHandler(nil), &twice.KindOpts{Strategy: twice.Transactional})
		cfg := testConfig(reg)
		cfg.Redeliver = true
		cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 4}}
		store := &completionCounter{Store: openStore(t, path), mu: &mu, counts: counts}
		startClient(t, store, cfg)
	}

	done := 0
	// modernc.org/sqlite under -race is slow: the deadline is long.
	waitfor.CondWithin(t, 20*time.Minute, fmt.Sprintf("all %d jobs to complete", jobs), func() bool {
		res, err := setup.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{State: twicetype.JobStateCompleted}})
		if err != nil {
			t.Fatal(err)
		}
		done = 0
		for _, c := range res.Counts {
			done += c.Count
		}
		return int64(done) == jobs
	}, func() string { return fmt.Sprintf("%d completed", done) })

	mu.Lock()
	defer mu.Unlock()
	for id := int64(1); id <= jobs; id++ {
		if counts[id] != 1 {
			t.Errorf("job %d completion written %d times, want 1", id, counts[id])
		}
	}
	if n := queryInt(t, setup, `SELECT count(*) FROM ledger`); n != jobs {
		t.Errorf("ledger rows = %d, want %d", n, jobs)
	}
	if n := queryInt(t, setup, `SELECT count(*) FROM (SELECT credit_id FROM ledger GROUP BY credit_id HAVING count(*) > 1)`); n != 0 {
		t.Errorf("%d credits applied more than once", n)
	}
	if c := queryInt(t, setup, `SELECT cents FROM balance`); c != jobs {
		t.Errorf("balance = %d, want %d", c, jobs)
	}
}
