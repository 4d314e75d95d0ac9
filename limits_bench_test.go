package twice_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
)

// benchLimitArgs is the no-op job of the flow-control benchmarks.
type benchLimitArgs struct {
	Key string `json:"key"`
}

func (benchLimitArgs) Kind() string { return "bench.limits.v1" }

// BenchmarkLimits compares burn-downs of b.N no-op jobs by one client
// with 50 workers, on SQLite and (with TWICE_TEST_POSTGRES) PostgreSQL,
// side by side: no limits; a global limit too high ever to bind (the
// cost of the limited fetch path); 1,000 keys with one job per key at a
// time; and a rate limit of 500 starts a second (well under what either store burns down unlimited), whose jobs/s is the
// steady rate (the first window's burst left out) and of_limit its ratio
// to the limit. Run with -benchtime=10000x so each case works the same
// jobs.
func BenchmarkLimits(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) twicestore.Store
	}{
		{"sqlite", func(b *testing.B) twicestore.Store { return newStore(b) }},
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores = append(stores, struct {
			name string
			open func(b *testing.B) twicestore.Store
		}{"postgres", func(b *testing.B) twicestore.Store {
			u, _ := pgtest.Schema(b, "bench_limits")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}})
	}
	const rate = 500
	cases := []struct {
		name string
		opts twice.KindOpts
		keys int
	}{
		{"none", twice.KindOpts{}, 0},
		{"global=unbound", twice.KindOpts{GlobalConcurrency: 1 << 30}, 0},
		{"keys=1000/per-key=1", twice.KindOpts{KeyConcurrency: 1, ConcurrencyKey: "key"}, 1000},
		{fmt.Sprintf("rate=%d/s", rate), twice.KindOpts{RateLimit: twice.RateLimit{Limit: rate, Period: time.Second}}, 0},
	}
	for _, s := range stores {
		for _, tc := range cases {
			b.Run(s.name+"/"+tc.name, func(b *testing.B) {
				starts := benchBurn(b, s.open(b), tc.opts, tc.keys)
				if tc.opts.RateLimit.Limit > 0 && len(starts) > rate {
					// Steady rate: the starts after the first window's
					// burst, over the time they took.
					span := starts[len(starts)-1].Sub(starts[0])
					r := float64(len(starts)-rate) / span.Seconds()
					b.ReportMetric(r, "jobs/s")
					b.ReportMetric(r/rate, "of_limit")
					return
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// benchBurn enqueues b.N jobs of a kind registered with opts (over keys
// keys, when keys > 0), then times a 50-worker client from its start until
// every outcome is written. It returns the handlers' start times, sorted.
func benchBurn(b *testing.B, store twicestore.Store, opts twice.KindOpts, keys int) []time.Time {
	ctx := context.Background()
	var (
		mu     sync.Mutex
		starts = make([]time.Time, 0, b.N)
	)
	all := make(chan struct{})
	reg := twice.NewRegistry()
	opts.Strategy = twice.None
	twice.MustRegister(reg, twice.HandlerFunc[benchLimitArgs](func(context.Context, *twice.Job[benchLimitArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if len(starts) == b.N {
			close(all)
		}
		return nil
	}), &opts)
	cfg := twice.Config{Registry: reg, Logger: discardLogger(),
		Queues: []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 50}}, MaxWorkers: 50}
	client, err := twice.NewClient(store, cfg)
	if err != nil {
		b.Fatal(err)
	}
	params := make([]twice.EnqueueParams, 0, 1000)
	for i := range b.N {
		a := benchLimitArgs{}
		if keys > 0 {
			a.Key = fmt.Sprint("k", i%keys)
		}
		params = append(params, twice.EnqueueParams{Args: a})
		if len(params) == cap(params) || i == b.N-1 {
			if _, err := client.EnqueueMany(ctx, params); err != nil {
				b.Fatal(err)
			}
			params = params[:0]
		}
	}
	b.ResetTimer()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d jobs ran", len(starts), b.N)
	}
	if err := client.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	return starts
}
