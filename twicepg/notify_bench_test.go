package twicepg

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
)

// BenchmarkInsertNotify: single-job inserts on the Store's pool (20
// connections), 500 a second from goroutines of their own as the latency
// bench enqueues, with the insert's notification sent in its own statement
// (the old way: PostgreSQL serialises the commits of transactions that
// notify, WAL flush included) against sent by the notifier's sender after
// the commit. It reports each insert's p50/p99 time and the inserts a
// second achieved; the old way falls behind once a notifying commit takes
// more than 2 ms (a loaded machine, or a slow disk).
func BenchmarkInsertNotify(b *testing.B) {
	for _, mode := range []string{"in-statement", "after-commit"} {
		b.Run("notify="+mode, func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_notify")
			s, err := Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			notifyInStatement = mode == "in-statement"
			defer func() { notifyInStatement = false }()
			ctx := context.Background()
			var (
				mu    sync.Mutex
				times []time.Duration
				wg    sync.WaitGroup
				errs  = make(chan error, 1)
			)
			n := max(b.N, 1000)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			b.ResetTimer()
			t0 := time.Now()
			for range n {
				<-tick.C
				wg.Go(func() {
					at := time.Now()
					_, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
						{Kind: "bench.notify.v1", Queue: "default", MaxAttempts: 1},
					}})
					if err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
					mu.Lock()
					times = append(times, time.Since(at))
					mu.Unlock()
				})
			}
			wg.Wait()
			elapsed := time.Since(t0)
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
			slices.Sort(times)
			pct := func(p float64) float64 {
				return float64(times[int(p*float64(len(times)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "inserts/s")
			b.ReportMetric(0, "ns/op")
			if len(times) != n {
				b.Fatalf("%d of %d inserts returned", len(times), n)
			}
		})
	}
}

// BenchmarkInsertOne: one job at a time, no unique key, on the Store's
// pool, through insertOneSQL against insertSQL (the batch statement, with
// its arrays and unique-key branch). ns/op is one insert, commit included.
func BenchmarkInsertOne(b *testing.B) {
	for _, mode := range []string{"batch-statement", "single-statement"} {
		b.Run(mode, func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_insert_one")
			s, err := Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "4"}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			insertOneOff = mode == "batch-statement"
			defer func() { insertOneOff = false }()
			ctx := context.Background()
			params := &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
				{Kind: "bench.insert.v1", Queue: "default", Args: []byte(`{"n":1}`), MaxAttempts: 3},
			}}
			for b.Loop() {
				if _, err := s.JobInsertMany(ctx, params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
