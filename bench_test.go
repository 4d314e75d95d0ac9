package twice_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
)

// BenchmarkEnqueue measures single enqueues on SQLite, one round trip each.
func BenchmarkEnqueue(b *testing.B) {
	c, err := twice.NewClient(newStore(b), twice.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c.Enqueue(ctx, pingArgs{N: i}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueMany measures batched enqueues on SQLite: one op is one
// job, sent in batches of 1,000.
func BenchmarkEnqueueMany(b *testing.B) {
	const batch = 1000
	c, err := twice.NewClient(newStore(b), twice.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	params := make([]twice.EnqueueParams, batch)
	for i := range params {
		params[i] = twice.EnqueueParams{Args: pingArgs{N: i}}
	}
	ctx := context.Background()
	b.ResetTimer()
	for left := b.N; left > 0; left -= batch {
		if _, err := c.EnqueueMany(ctx, params[:min(batch, left)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkWork measures working no-op jobs on SQLite: b.N jobs are
// inserted, then timed from the worker's start until every outcome is
// written (Stop flushes the completer). The strategy sub-benchmarks at 10
// workers give the cost of ClaimAfter's marker against None.
func BenchmarkWork(b *testing.B) {
	for _, workers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("strategy=none/workers=%d", workers), func(b *testing.B) {
			benchWork(b, twice.None, workers)
		})
	}
	b.Run("strategy=claim-after/workers=10", func(b *testing.B) {
		benchWork(b, twice.ClaimAfter, 10)
	})
}

func benchWork(b *testing.B, strategy twice.Strategy, workers int) {
	store := newStore(b)
	ctx := context.Background()
	var done atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, _ *twice.Job[pingArgs]) error {
		if done.Add(1) == n {
			close(all)
		}
		return nil
	}), &twice.KindOpts{Strategy: strategy})
	producer, err := twice.NewClient(store, twice.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	params := make([]twice.EnqueueParams, 0, 1000)
	for i := range b.N {
		params = append(params, twice.EnqueueParams{Args: pingArgs{N: i}})
		if len(params) == cap(params) || i == b.N-1 {
			if _, err := producer.EnqueueMany(ctx, params); err != nil {
				b.Fatal(err)
			}
			params = params[:0]
		}
	}
	client, err := twice.NewClient(store, twice.Config{
		Registry:   reg,
		Queues:     []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: workers}},
		MaxWorkers: workers,
		Logger:     discardLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d jobs ran", done.Load(), n)
	}
	if err := client.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
