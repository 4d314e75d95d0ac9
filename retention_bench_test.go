package twice_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// historyKinds is how many switches the benchmark's history flips.
const historyKinds = 10

// retentionTables are the tables a retention pass empties, as the report
// lists them.
var retentionTables = []string{"twice_jobs", "twice_workflows", "twice_workflow_tasks", "twice_workflow_deps",
	"twice_batches", "twice_toggle_history"}

// passTimingStore times one pruning pass: from its first batch of
// finished jobs to its last batch of markers, the pass's last prune; and,
// within it, the time spent pruning workflows and batches.
type passTimingStore struct {
	twicestore.Store
	once    sync.Once
	started time.Time
	done    chan time.Duration

	mu                 sync.Mutex
	workflows, batches time.Duration
}

func (s *passTimingStore) WorkflowPrune(ctx context.Context, p *twicestore.WorkflowPruneParams) (*twicestore.PruneScanResult, error) {
	defer s.add(&s.workflows, time.Now())
	return s.Store.WorkflowPrune(ctx, p)
}

func (s *passTimingStore) BatchPrune(ctx context.Context, p *twicestore.BatchPruneParams) (*twicestore.PruneScanResult, error) {
	defer s.add(&s.batches, time.Now())
	return s.Store.BatchPrune(ctx, p)
}

func (s *passTimingStore) add(d *time.Duration, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*d += time.Since(since)
}

func (s *passTimingStore) JobDeleteFinished(ctx context.Context, p *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	s.once.Do(func() { s.started = time.Now() })
	return s.Store.JobDeleteFinished(ctx, p)
}

func (s *passTimingStore) MarkerPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	res, err := s.Store.MarkerPrune(ctx, p)
	if err != nil || res.Deleted < p.Limit {
		select {
		case s.done <- time.Since(s.started):
		default:
		}
	}
	return res, err
}

// retentionBenchStore is a fresh store and a way to count its rows.
type retentionBenchStore struct {
	store twicestore.Store
	count func(table string) int
}

// fillForRetention stores n finished workflows (two tasks, one
// dependency), n finished batches (one job and its callback) and
// historyRows switch changes over historyKinds kinds, through the store's
// API.
func fillForRetention(b *testing.B, s twicestore.Store, n, historyRows int) {
	ctx := context.Background()
	job := func(kind string) *twicestore.JobInsertParams {
		return &twicestore.JobInsertParams{Kind: kind, Queue: "retention", Args: []byte(`{"customer":12345,"order":"A-2031-000042"}`),
			MessageID: "m", MaxAttempts: 1}
	}
	for i := 0; i < n; i += 500 { // 500 of each a transaction: the fill is not what is measured
		tx, err := s.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for range min(500, n-i) {
			if _, err := tx.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "retention", Tasks: []*twicestore.WorkflowTaskParams{
				{Name: "a", Job: job("bench.task.v1")}, {Name: "b", Deps: []string{"a"}, Job: job("bench.task.v1")},
			}}); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: job("bench.callback.v1"),
				Jobs: []*twicestore.JobInsertParams{job("bench.member.v1")}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	kinds := []string{"bench.task.v1", "bench.member.v1", "bench.callback.v1"}
	for {
		res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "retention", Kinds: kinds, Limit: 1000,
			Node: "bench", Now: time.Now().Add(time.Minute), LeaseUntil: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Jobs) == 0 {
			break
		}
		outcomes := make([]*twicestore.JobOutcome, len(res.Jobs))
		for i, j := range res.Jobs {
			outcomes[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: time.Now()}
		}
		if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range historyRows {
		if err := s.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
			Kind: fmt.Sprintf("bench.switch%d.v1", i%historyKinds), Enabled: i%2 == 0, By: "ops", Reason: "flip"}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetentionPass measures one pruning pass with 1 ms retentions
// over n finished workflows and n finished batches (issue 20 #5): the
// rows of each table before and after, and how long the pass took, from
// its first batch of jobs to its last batch of markers. Run it with
// -benchtime=1x; TWICE_RETENTION_N sets n (5000 by default), -short makes
// it a smoke run (50) that only checks the pass deletes what it should.
func BenchmarkRetentionPass(b *testing.B) {
	n, history := 5000, 500
	if v := os.Getenv("TWICE_RETENTION_N"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("TWICE_RETENTION_N=%q: %v", v, err)
		}
	}
	if testing.Short() {
		n, history = 50, 50 // a smoke run: that it works, not how fast
	}
	opens := []struct {
		name string
		open func(b *testing.B) retentionBenchStore
	}{{"sqlite", func(b *testing.B) retentionBenchStore {
		path := filepath.Join(b.TempDir(), "twice.db")
		s := openStore(b, path)
		db, err := sql.Open("sqlite", path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return retentionBenchStore{s, func(table string) (rows int) {
			if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&rows); err != nil {
				b.Fatal(err)
			}
			return rows
		}}
	}}}
	if os.Getenv(pgtest.EnvURL) != "" {
		opens = append(opens, struct {
			name string
			open func(b *testing.B) retentionBenchStore
		}{"postgres", func(b *testing.B) retentionBenchStore {
			u, _ := pgtest.Schema(b, "bench_retention")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			pool, err := pgxpool.New(context.Background(), u)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			return retentionBenchStore{s, func(table string) (rows int) {
				if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
					b.Fatal(err)
				}
				return rows
			}}
		}})
	}
	for _, o := range opens {
		b.Run(o.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				rs := o.open(b)
				fillForRetention(b, rs.store, n, history)
				left := 0 // rows a pass should have deleted, at the last count
				counts := func() string {
					var parts []string
					left = 0
					for _, table := range retentionTables {
						rows := rs.count(table)
						parts = append(parts, fmt.Sprintf("%s %d", table, rows))
						if table != "twice_toggle_history" {
							left += rows
						} else {
							left += rows - historyKinds // each switch's newest change stays
						}
					}
					return strings.Join(parts, ", ")
				}
				before := counts()
				timing := &passTimingStore{Store: rs.store, done: make(chan time.Duration, 1)}
				cfg := testConfig(nil)
				cfg.CompletedRetention, cfg.DeadRetention, cfg.DiscardedRetention = time.Millisecond, time.Millisecond, time.Millisecond
				cfg.ToggleHistoryRetention = time.Millisecond
				cfg.Queues = []twice.QueueConfig{{Name: "idle"}}
				b.StartTimer()
				startClient(b, timing, cfg) // the pruner runs once at start
				took := waitfor.RecvWithin(b, 10*time.Minute, timing.done, "the pruning pass to end")
				b.StopTimer()
				b.ReportMetric(took.Seconds(), "pass-s")
				timing.mu.Lock()
				wf, bt := timing.workflows, timing.batches
				timing.mu.Unlock()
				b.Logf("%s, n=%d: pass %s (workflows %s, batches %s)\n  before: %s\n  after:  %s", o.name, n,
					took.Round(time.Millisecond), wf.Round(time.Millisecond), bt.Round(time.Millisecond), before, counts())
				if left != 0 {
					b.Errorf("%d rows the pass should have deleted are left", left)
				}
			}
		})
	}
}
