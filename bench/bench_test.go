package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "fast"}, `mode "fast"`},
		{Config{Mode: ModeBurndown, Strategy: "claim-before"}, `strategy "claim-before"`},
		{Config{Mode: ModeBurndown, Jobs: -1}, "jobs -1"},
		{Config{Mode: ModeSteady, Duration: -time.Second}, "duration -1s"},
		{Config{Mode: ModeLatency, Rate: -1}, "rate -1"},
		{Config{Mode: ModeLatency, Rate: 200_000}, "at most 100000"},
		{Config{Mode: ModeBurndown, Workers: -3}, "workers -3"},
		{Config{Mode: ModeBurndown}, ""},
	} {
		err := tc.cfg.Validate()
		if got := fmt.Sprint(err); (tc.want == "") != (err == nil) || (err != nil && !contains(got, tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestRunCountsOnlyItsJobs: a burn-down counts its own jobs, not those an
// earlier run left queued, and reports them all.
func TestRunCountsOnlyItsJobs(t *testing.T) {
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for range 2 {
		res, err := Run(ctx, Config{Store: store, Mode: ModeBurndown, Jobs: 200, Workers: 5, Strategy: "claim-after"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs != 200 || res.Mode != ModeBurndown || res.Strategy != "claim-after" {
			t.Errorf("result %+v: want a claim-after burn-down of 200 jobs", res)
		}
	}
}

// TestSteadyReportsFetchToStart: a steady run reports its jobs'
// fetch-to-start percentiles, in order, and passes the run's own Observer
// every event still.
func TestSteadyReportsFetchToStart(t *testing.T) {
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var started atomic.Int64
	res, err := Run(ctx, Config{Store: store, Mode: ModeSteady, Duration: time.Second, Workers: 5,
		Observer: twice.ObserverFunc(func(e twice.Event) {
			if e.Type == twice.EventStarted {
				started.Add(1)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs == 0 || res.P50ms <= 0 || res.P50ms > res.P95ms || res.P95ms > res.P99ms {
		t.Errorf("result %+v: want jobs and fetch-to-start percentiles 0 < p50 <= p95 <= p99", res)
	}
	if started.Load() < int64(res.Jobs) {
		t.Errorf("the run's Observer saw %d starts, fewer than the %d jobs counted", started.Load(), res.Jobs)
	}
}

// countingStore counts the fetch and finish statements a run sends; the
// embedded *twicepg.Store keeps every optional capability (LISTEN, the
// batch peek) that an interface wrapper would hide.
type countingStore struct {
	*twicepg.Store
	fetches, finishes atomic.Int64
}

func (c *countingStore) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	c.fetches.Add(1)
	return c.Store.JobFetch(ctx, p)
}

func (c *countingStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	c.finishes.Add(1)
	return c.Store.JobFinish(ctx, p)
}

// BenchmarkBurndownPostgres: a burn-down of b.N no-op jobs by 2,000
// workers on PostgreSQL, with fetches of at most 100 (the old
// FetchLimitDefault) and 1,000 (the new one) jobs. It reports the fetch
// and finish statements sent per 1,000 jobs, which the fetch loop's
// gathering of freed slots and the completer's batch size set.
func BenchmarkBurndownPostgres(b *testing.B) {
	for _, limit := range []int{100, 1000} {
		b.Run(fmt.Sprintf("fetch-limit=%d", limit), func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_burndown")
			pg, err := twicepg.Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
			if err != nil {
				b.Fatal(err)
			}
			defer pg.Close()
			store := &countingStore{Store: pg}
			jobs := max(b.N, 1000)
			res, err := Run(context.Background(), Config{Store: store, Mode: ModeBurndown, Jobs: jobs, Workers: 2000, FetchLimit: limit})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.JobsPerS, "jobs/s")
			b.ReportMetric(float64(store.fetches.Load())*1000/float64(jobs), "fetches/1k-jobs")
			b.ReportMetric(float64(store.finishes.Load())*1000/float64(jobs), "finishes/1k-jobs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkClaimAfterPostgres: a ClaimAfter burn-down of b.N jobs by 2,000
// workers on PostgreSQL, peeking each job's marker in a round trip of its
// own (through a store wrapper that drops the fetch's answers, as before
// the fetch peeked) against peeking in the fetch statement.
func BenchmarkClaimAfterPostgres(b *testing.B) {
	for _, peek := range []string{"one-by-one", "in-fetch"} {
		b.Run("peek="+peek, func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_claim_after")
			pg, err := twicepg.Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
			if err != nil {
				b.Fatal(err)
			}
			defer pg.Close()
			var store twicestore.Store = pg
			if peek == "one-by-one" {
				store = answerDropper{pg}
			}
			res, err := Run(context.Background(), Config{Store: store, Mode: ModeBurndown, Strategy: "claim-after", Jobs: max(b.N, 1000), Workers: 2000})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.JobsPerS, "jobs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// answerDropper hands back a fetch's jobs without its peeks' answers, so
// each ClaimAfter job peeks its marker itself.
type answerDropper struct{ twicestore.Store }

func (s answerDropper) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err != nil {
		return nil, err
	}
	res.Processed = nil
	return res, nil
}

// BenchmarkLatencyPostgres: the latency workload (500 jobs a second for
// b.N milliseconds, at least 3 s, 2,000 workers, a pool of 20) on
// PostgreSQL; it reports enqueue-to-start p50/p99 and, of those, the
// enqueue's own share (enqueue-p50/p99, to the commit).
func BenchmarkLatencyPostgres(b *testing.B) {
	u, _ := pgtest.Schema(b, "bench_latency")
	store, err := twicepg.Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	res, err := Run(context.Background(), Config{Store: store, Mode: ModeLatency, Duration: max(time.Duration(b.N)*time.Millisecond, 3*time.Second), Workers: 2000})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.P50ms, "p50-ms")
	b.ReportMetric(res.P99ms, "p99-ms")
	b.ReportMetric(res.EnqueueP50ms, "enqueue-p50-ms")
	b.ReportMetric(res.EnqueueP99ms, "enqueue-p99-ms")
	b.ReportMetric(0, "ns/op")
}
