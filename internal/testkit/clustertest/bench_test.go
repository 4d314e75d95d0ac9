package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
)

// enqueueNoops inserts n no-op jobs in batches of 1,000.
func enqueueNoops(b *testing.B, client *twice.Client, n int) {
	b.Helper()
	batch := make([]twice.EnqueueParams, 0, 1000)
	for i := range n {
		batch = append(batch, twice.EnqueueParams{Args: noopArgs{N: int64(i)}})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := client.EnqueueMany(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkPostgresEnqueueMany: batched enqueue; one op is one job, sent
// 1,000 to a statement.
func BenchmarkPostgresEnqueueMany(b *testing.B) {
	c := newCluster(b, postgresBackend)
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	enqueueNoops(b, producer, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkPostgresWork: b.N no-op jobs wait in a full queue; the timer
// runs from starting the worker processes (50 slots each) until the last
// job is completed in the store. Process start-up is inside the timing.
func BenchmarkPostgresWork(b *testing.B) {
	for _, procs := range []int{1, 3} {
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			c := newCluster(b, postgresBackend)
			producer, err := twice.NewClient(c.store, twice.Config{})
			if err != nil {
				b.Fatal(err)
			}
			enqueueNoops(b, producer, b.N)
			b.ResetTimer()
			for i := range procs {
				c.start(fmt.Sprint("bench-", i), envSlots+"=50")
			}
			c.waitCompleted(b.N, 15*time.Minute)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			c.workers.StopAll()
		})
	}
}

// BenchmarkPostgresLatency: jobs are enqueued at 500 a second by one
// client and worked by another with its own pool, so every wake-up comes
// through PostgreSQL's NOTIFY; each job's enqueue-to-start time is measured
// in its handler.
func BenchmarkPostgresLatency(b *testing.B) {
	const rate = 500
	c := newCluster(b, postgresBackend)
	ctx := context.Background()
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		b.Fatal(err)
	}
	workerStore, err := twicepg.Open(ctx, c.url)
	if err != nil {
		b.Fatal(err)
	}
	defer workerStore.Close()
	var (
		mu        sync.Mutex
		latencies []time.Duration
	)
	all, warm := make(chan struct{}), make(chan struct{})
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[noopArgs](func(_ context.Context, job *twice.Job[noopArgs]) error {
		lat := time.Since(job.CreatedAt)
		if job.Args.N < 0 {
			close(warm)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		latencies = append(latencies, lat)
		if len(latencies) == b.N {
			close(all)
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	worker, err := twice.NewClient(workerStore, twice.Config{
		Registry: reg, Queues: []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 50}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = worker.Stop(ctx) }()
	// One job before the timer: the worker is fetching and listening.
	if _, err := producer.Enqueue(ctx, noopArgs{N: -1}, nil); err != nil {
		b.Fatal(err)
	}
	<-warm

	b.ResetTimer()
	tick := time.NewTicker(time.Second / rate)
	for i := range b.N {
		<-tick.C
		if _, err := producer.Enqueue(ctx, noopArgs{N: int64(i)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("only %d of %d jobs started", len(latencies), b.N)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.95), "p95_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}
